package api

// Well-known labels and annotations. Kubernetes' own names are used where a
// Kubernetes user would look for them; Flotilla's live under flotilla.dev.
const (
	// LabelSource marks an object applied by a GitSource: "<namespace>.<name>".
	LabelSource = "flotilla.dev/source"
	// AnnotationSourceCommit records the commit an object was last applied from.
	AnnotationSourceCommit = "flotilla.dev/commit"
	// AnnotationLastApplied holds the manifest a GitSource last applied an
	// object from: flotctl reads it to tell the fields Git sets (and the
	// next sync restores) from those it leaves alone.
	AnnotationLastApplied = "flotilla.dev/last-applied"
	// AnnotationReconcile opts an object out of drift correction when "disabled".
	AnnotationReconcile = "flotilla.dev/reconcile"
	// LabelAutonomy on a Node means its pods are never evicted for unreachability.
	LabelAutonomy = "node.flotilla.dev/autonomy"
	// AnnotationPrepull on a DaemonSet ("true") makes each device pull and
	// verify a new revision's images before its old pod is stopped.
	AnnotationPrepull = "flotilla.dev/prepull"
	// AnnotationPrepullImages on a pod lists, comma-separated, the images
	// its DaemonSet's next revision needs; the device pulls them and
	// answers with ConditionImagesPrepulled.
	AnnotationPrepullImages = "flotilla.dev/prepull-images"
	// ConditionImagesPrepulled is the pod condition a device sets for
	// AnnotationPrepullImages: True, with the annotation's value as its
	// message, once every image is present and verified; False with the
	// reason (Pulling, ErrImagePull, ErrImageSignature) otherwise.
	ConditionImagesPrepulled = "flotilla.dev/ImagesPrepulled"
	// NodeLabelPrefix is the label prefix a node may set on itself.
	NodeLabelPrefix = "node.flotilla.dev/"

	// AnnotationMirrorPod marks a pod that mirrors a static pod on a device.
	AnnotationMirrorPod = "kubernetes.io/config.mirror"
	// AnnotationConfigSource says where a static pod came from ("file").
	AnnotationConfigSource = "kubernetes.io/config.source"
	// AnnotationConfigHash is a static pod's UID, the hash of its manifest;
	// its mirror pod carries the same value in AnnotationMirrorPod.
	AnnotationConfigHash = "kubernetes.io/config.hash"
	// AnnotationServiceEndpoint on a static pod ("true") asks for its mirror
	// pod to be an endpoint of the Services that select it; only Services
	// with AnnotationMirrorEndpoints take it. Other mirror pods are never
	// endpoints, whatever their labels.
	AnnotationServiceEndpoint = "flotilla.dev/service-endpoint"
	// AnnotationMirrorEndpoints on a Service ("true") takes the mirror pods
	// its selector matches and that ask for it (AnnotationServiceEndpoint)
	// among its endpoints. Devices write their mirror pods, never Services:
	// this is the hub's side of the decision.
	AnnotationMirrorEndpoints = "flotilla.dev/mirror-endpoints"
	// LabelServiceName ties an EndpointSlice to its Service.
	LabelServiceName = "kubernetes.io/service-name"
	// LabelManagedBy names the controller that owns an EndpointSlice.
	LabelManagedBy = "endpointslice.kubernetes.io/managed-by"
	// LabelPodTemplateHash distinguishes the ReplicaSets of one Deployment.
	LabelPodTemplateHash = "pod-template-hash"
	// LabelHostname is set on every Node to its name.
	LabelHostname = "kubernetes.io/hostname"
	// LabelArch and LabelOS describe a Node's platform.
	LabelArch = "kubernetes.io/arch"
	LabelOS   = "kubernetes.io/os"
	// LabelZone is the default topology key for spreading.
	LabelZone = "topology.kubernetes.io/zone"

	// Namespaces that exist from the hub's first start.
	NamespaceDefault   = "default"
	NamespaceNodeLease = "kube-node-lease"
	NamespaceSystem    = "flotilla-system"
)

// Network defaults shared by the hub's allocators and the agents.
const (
	// ClusterCIDRs are the ranges the hub cuts devices' pod CIDRs from, in
	// order (--cluster-cidr): 10.42.0.0/16 first, the range fleets before
	// 16,384 devices were possible used, then 10.64.0.0/10. With /24 per
	// device that is 256 + 16,384 devices, none overlapping ServiceCIDR.
	ClusterCIDRs = "10.42.0.0/16,10.64.0.0/10"
	// ClusterCIDR is the pod network an agent assumes when its Node does
	// not say (AnnotationClusterCIDRs): a hub from before the ranges were
	// announced, which used only this one.
	ClusterCIDR = "10.42.0.0/16"
	// AnnotationClusterCIDRs on a Node tells its agent the fleet's pod
	// ranges (comma-separated), which its proxy and routes treat as the
	// pod network; the hub writes it with the pod CIDR.
	AnnotationClusterCIDRs = "flotilla.dev/cluster-cidrs"
	ServiceCIDR            = "10.43.0.0/16"
	NodePortMin            = 30000
	NodePortMax            = 32767
	MaxObjectSize          = 1 << 20
)
