package defaults

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/v1alpha1"
)

// Defaults of a GitSource (issue 7).
const (
	GitSourceBranch   = "main"
	GitSourceInterval = 30 * time.Second
	GitSourceTimeout  = 60 * time.Second
	// GitVerifyModeHead checks the signature of the followed commit.
	GitVerifyModeHead = "head"
)

// Defaults of a RolloutPolicy (issue 16): a wave is watched for a minute
// of readiness, gets ten minutes to become ready, tolerates no failure, and
// a failure holds the rollout, which changes nothing that was running.
const (
	RolloutReadySeconds   = 60
	RolloutTimeoutSeconds = 600
	RolloutMaxFailures    = 0
	RolloutOnFailure      = v1alpha1.RolloutFailurePause
)

// Default fills in the empty fields of obj in place, as Kubernetes would on
// create or update. Objects of kinds the hub does not serve are left alone.
func Default(obj runtime.Object) {
	switch o := obj.(type) {
	case *corev1.Pod:
		pod(o)
	case *corev1.Service:
		service(o)
	case *corev1.Secret:
		secret(o)
	case *corev1.ConfigMap:
		if o.Data == nil {
			o.Data = map[string]string{}
		}
	case *corev1.Namespace:
		namespace(o)
	case *corev1.Node:
		node(o)
	case *corev1.Event, *coordinationv1.Lease:
		// Kubernetes defines no defaults for these.
	case *discoveryv1.EndpointSlice:
		endpointSlice(o)
	case *appsv1.Deployment:
		deployment(o)
	case *appsv1.ReplicaSet:
		replicaSet(o)
	case *appsv1.DaemonSet:
		daemonSet(o)
	case *batchv1.Job:
		job(o)
	case *batchv1.CronJob:
		cronJob(o)
	case *schedulingv1.PriorityClass:
		if o.PreemptionPolicy == nil {
			p := corev1.PreemptLowerPriority
			o.PreemptionPolicy = &p
		}
	case *v1alpha1.GitSource:
		gitSource(o)
	case *v1alpha1.RolloutPolicy:
		rolloutPolicy(o)
	}
}

// DefaultUpdate defaults obj, the new version of old, and carries over the
// values the hub allocated for old that obj leaves empty: a client that PUTs
// the manifest it keeps in Git (without clusterIP or nodePort) must not lose
// the Service's address. Kubernetes does the same in its Service registry.
func DefaultUpdate(obj, old runtime.Object) {
	if svc, ok := obj.(*corev1.Service); ok {
		if oldSvc, ok := old.(*corev1.Service); ok {
			keepAllocated(svc, oldSvc)
		}
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		if oldPod, ok := old.(*corev1.Pod); ok {
			// Admission resolved these from the class on create; a
			// client that sends its manifest back must not lose them
			// (Kubernetes' Priority admission keeps them too).
			if pod.Spec.Priority == nil {
				pod.Spec.Priority = oldPod.Spec.Priority
			}
			if pod.Spec.PreemptionPolicy == nil {
				pod.Spec.PreemptionPolicy = oldPod.Spec.PreemptionPolicy
			}
		}
	}
	Default(obj)
}

func namespace(ns *corev1.Namespace) {
	// Lets a namespaceSelector pick a namespace by name. The name must be
	// generated from generateName before Default runs.
	if ns.Name != "" {
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[corev1.LabelMetadataName] = ns.Name
	}
	if ns.Status.Phase == "" {
		ns.Status.Phase = corev1.NamespaceActive
	}
}

func node(n *corev1.Node) {
	// v1 carries the pod range twice; keep both views in step.
	if n.Spec.PodCIDR != "" && len(n.Spec.PodCIDRs) == 0 {
		n.Spec.PodCIDRs = []string{n.Spec.PodCIDR}
	}
	if n.Spec.PodCIDR == "" && len(n.Spec.PodCIDRs) > 0 {
		n.Spec.PodCIDR = n.Spec.PodCIDRs[0]
	}
	if n.Status.Allocatable == nil && n.Status.Capacity != nil {
		n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	}
	roundUp(n.Status.Capacity)
	roundUp(n.Status.Allocatable)
}

func secret(s *corev1.Secret) {
	if s.Type == "" {
		s.Type = corev1.SecretTypeOpaque
	}
	// stringData is write-only: Kubernetes folds it into data when the
	// object is decoded, and it wins over data for the same key.
	if len(s.StringData) > 0 {
		if s.Data == nil {
			s.Data = make(map[string][]byte, len(s.StringData))
		}
		for k, v := range s.StringData {
			s.Data[k] = []byte(v)
		}
	}
	s.StringData = nil
}

func endpointSlice(es *discoveryv1.EndpointSlice) {
	// Devices watch only their site's slices and the fleet-wide ones
	// (api.SiteSelector). The hub's EndpointSlice loop labels its slices
	// with their site; a slice anyone else writes, for a Service without
	// a selector say, names addresses the writer chose for everyone.
	if _, ok := es.Labels[api.LabelSite]; !ok {
		if es.Labels == nil {
			es.Labels = map[string]string{}
		}
		es.Labels[api.LabelSite] = api.SiteFleet
	}
	for i := range es.Ports {
		p := &es.Ports[i]
		if p.Name == nil {
			p.Name = ptr("")
		}
		if p.Protocol == nil {
			p.Protocol = ptr(corev1.ProtocolTCP)
		}
	}
}

func gitSource(gs *v1alpha1.GitSource) {
	s := &gs.Spec
	if s.Ref.Branch == "" && s.Ref.Tag == "" && s.Ref.Commit == "" {
		s.Ref.Branch = GitSourceBranch
	}
	if s.Interval == nil {
		s.Interval = &metav1.Duration{Duration: GitSourceInterval}
	}
	if s.Timeout == nil {
		s.Timeout = &metav1.Duration{Duration: GitSourceTimeout}
	}
	if s.Prune == nil {
		s.Prune = ptr(true)
	}
	if s.Verify != nil && s.Verify.Mode == "" {
		s.Verify.Mode = GitVerifyModeHead
	}
}

func rolloutPolicy(rp *v1alpha1.RolloutPolicy) {
	c := &rp.Spec.SuccessCriteria
	if c.ReadySeconds == nil {
		c.ReadySeconds = ptr(int32(RolloutReadySeconds))
	}
	if c.TimeoutSeconds == nil {
		c.TimeoutSeconds = ptr(int32(RolloutTimeoutSeconds))
	}
	if c.MaxFailures == nil {
		c.MaxFailures = ptr(intstr.FromInt32(RolloutMaxFailures))
	}
	if rp.Spec.OnFailure == "" {
		rp.Spec.OnFailure = RolloutOnFailure
	}
}

func ptr[T any](v T) *T { return &v }
