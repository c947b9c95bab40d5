package auth

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub/apiserver"
)

// NodeRestriction is the admission step for writes made by devices: it
// checks the objects themselves where the authorizer could only see names.
type NodeRestriction struct{}

var _ apiserver.Admission = NodeRestriction{}

// nodeSettableLabels are the labels a device may set on its own Node
// besides those under api.NodeLabelPrefix: facts about the device that
// the agent reports, as the kubelet does. The hostname label must equal
// the Node's name.
var nodeSettableLabels = map[string]bool{
	api.LabelHostname:         true,
	api.LabelArch:             true,
	api.LabelOS:               true,
	"beta.kubernetes.io/arch": true,
	"beta.kubernetes.io/os":   true,
}

// NodeMaySetLabel reports whether a device may set or change the label
// key on its own Node. Every other label can attract workloads (any label
// can be a nodeSelector), so only admins set them; so is the autonomy
// label, which decides whether the hub may move the device's pods away: a
// stolen or broken device must not be able to keep its workloads.
func NodeMaySetLabel(key string) bool {
	if key == api.LabelAutonomy {
		return false
	}
	return strings.HasPrefix(key, api.NodeLabelPrefix) || nodeSettableLabels[key]
}

// Admit implements apiserver.Admission.
func (NodeRestriction) Admit(ctx context.Context, a apiserver.Attributes, obj, old runtime.Object) error {
	node := NodeName(a.User)
	if node == "" {
		if err := admitMirrorByPerson(a, podOf(obj), podOf(old)); err != nil {
			return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, objName(obj, old), err)
		}
		return nil
	}
	var err error
	switch firstNonNil(obj, old).(type) {
	case *corev1.Pod:
		err = admitPod(ctx, node, a, podOf(obj), podOf(old))
	case *corev1.Event:
		err = admitEvent(ctx, node, eventOf(obj), eventOf(old))
	case *corev1.Node:
		err = admitNode(ctx, node, a, nodeOf(obj), nodeOf(old))
	case *coordinationv1.Lease:
		if obj != nil {
			l := obj.(*coordinationv1.Lease)
			if l.Name != node || l.Namespace != api.NamespaceNodeLease {
				err = fmt.Errorf("node restriction: device %s may write only the Lease %s/%s, not %s/%s", node, api.NamespaceNodeLease, node, l.Namespace, l.Name)
			}
		}
	}
	if err == nil {
		return nil
	}
	gr := schema.GroupResource{Group: a.APIGroup, Resource: a.Resource}
	return apierrors.NewForbidden(gr, objName(obj, old), err)
}

func firstNonNil(a, b runtime.Object) runtime.Object {
	if a != nil {
		return a
	}
	return b
}

func podOf(o runtime.Object) *corev1.Pod {
	p, _ := o.(*corev1.Pod)
	return p
}

func eventOf(o runtime.Object) *corev1.Event {
	e, _ := o.(*corev1.Event)
	return e
}

func nodeOf(o runtime.Object) *corev1.Node {
	n, _ := o.(*corev1.Node)
	return n
}

func objName(obj, old runtime.Object) string {
	type named interface{ GetName() string }
	if n, ok := firstNonNil(obj, old).(named); ok {
		return n.GetName()
	}
	return ""
}

func isMirror(p *corev1.Pod) bool {
	_, ok := p.Annotations[api.AnnotationMirrorPod]
	return ok
}

// admitMirrorByPerson keeps mirror pods read-only for everyone but their
// device: a mirror pod stands for a static pod in a device's manifests
// dir, and only that file changes it. Deleting one is allowed (the device
// makes it again), and so are status writes (the hub marks the pods of a
// silent device not ready).
func admitMirrorByPerson(a apiserver.Attributes, obj, old *corev1.Pod) error {
	if a.Subresource == "status" || obj == nil {
		return nil
	}
	switch {
	case old == nil && isMirror(obj):
		return fmt.Errorf("node restriction: mirror pods are made by the device that runs the static pod; put the manifest in that device's manifests dir (/etc/flotilla/manifests) instead")
	case old != nil && (isMirror(old) || isMirror(obj)):
		return fmt.Errorf("node restriction: pod %s/%s mirrors a static pod on device %s and is read-only here; change the manifest in that device's manifests dir", old.Namespace, old.Name, old.Spec.NodeName)
	}
	return nil
}

func admitPod(ctx context.Context, node string, a apiserver.Attributes, obj, old *corev1.Pod) error {
	switch {
	case old == nil: // create
		return admitMirrorPod(node, obj)
	case obj == nil: // delete
		if old.Spec.NodeName != node {
			return fmt.Errorf("node restriction: device %s may delete only pods bound to it", node)
		}
		if old.DeletionTimestamp == nil && !isMirror(old) {
			return fmt.Errorf("node restriction: device %s may only finish the deletion of its pods once it has begun, or delete its mirror pods", node)
		}
		return nil
	default: // update
		if old.Spec.NodeName != node {
			return fmt.Errorf("node restriction: device %s may update only pods bound to it", node)
		}
		if a.Subresource != "status" {
			return errors.New("node restriction: devices may write only the status of their pods")
		}
		return admitPodAddresses(ctx, node, obj, old)
	}
}

// mirrorReservedLabels are the labels the hub's controllers (and
// Kubernetes') give the pods they make, which their selectors count on:
// pods a device makes may not carry them. Labels under
// reservedLabelPrefix are the hub's own (GitSource inventories).
var mirrorReservedLabels = []string{
	api.LabelPodTemplateHash, "controller-revision-hash", "pod-template-generation",
	"statefulset.kubernetes.io/pod-name", "apps.kubernetes.io/pod-index",
	"controller-uid", "job-name", "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name",
}

const reservedLabelPrefix = "flotilla.dev/"

// AnnotationPodDeletionCost is Kubernetes' annotation that orders a
// ReplicaSet's scale-down; a device may not set it on the pods it makes.
const AnnotationPodDeletionCost = "controller.kubernetes.io/pod-deletion-cost"

// admitMirrorPod: the only pods a device makes are the mirrors of its
// static pods. They stand for what the device runs, and nothing on the hub
// may take them for its own: no owner references (no controller adopts or
// collects them), none of the labels controllers select their pods by, no
// say in a ReplicaSet's scale-down, no Secrets, ConfigMaps or service
// account (the device could read them through the pod).
func admitMirrorPod(node string, obj *corev1.Pod) error {
	if !isMirror(obj) {
		return fmt.Errorf("node restriction: devices may create only mirror pods of their static pods (annotation %s)", api.AnnotationMirrorPod)
	}
	if obj.Spec.NodeName != node {
		return fmt.Errorf("node restriction: device %s may create mirror pods only bound to itself (spec.nodeName %q)", node, obj.Spec.NodeName)
	}
	if s, c := podReferences(obj); len(s)+len(c) > 0 {
		return fmt.Errorf("node restriction: a mirror pod may not reference Secrets or ConfigMaps (%s)", strings.Join(append(s, c...), ", "))
	}
	if obj.Spec.ServiceAccountName != "" {
		return errors.New("node restriction: a mirror pod may not use a service account")
	}
	if len(obj.OwnerReferences) > 0 {
		r := obj.OwnerReferences[0]
		return fmt.Errorf("node restriction: a mirror pod may have no owner references (it has %s %s): it belongs to the device's manifests dir, not to an object on the hub", r.Kind, r.Name)
	}
	keys := make([]string, 0, len(obj.Labels))
	for k := range obj.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if slices.Contains(mirrorReservedLabels, k) || strings.HasPrefix(k, reservedLabelPrefix) {
			return fmt.Errorf("node restriction: a mirror pod may not carry the label %q: the hub's controllers and sources select their own pods by it", k)
		}
	}
	if _, ok := obj.Annotations[AnnotationPodDeletionCost]; ok {
		return fmt.Errorf("node restriction: a mirror pod may not carry the annotation %s, which orders a ReplicaSet's scale-down", AnnotationPodDeletionCost)
	}
	return nil
}

var nodesGVR = corev1.SchemeGroupVersion.WithResource("nodes")
var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

// admitPodAddresses: the addresses a device reports for its pods become
// Service endpoints, so they must be the device's own: in its pod CIDR, or
// for a hostNetwork pod one of the Node's addresses. Addresses the pod
// already had are kept as they are (a pod CIDR that moved is the device's
// to catch up with, by restarting the pod).
func admitPodAddresses(ctx context.Context, node string, obj, old *corev1.Pod) error {
	ips, hosts := podIPs(obj), hostIPs(obj)
	if slices.Equal(ips, podIPs(old)) && slices.Equal(hosts, hostIPs(old)) {
		return nil
	}
	lookup := apiserver.LookupFrom(ctx)
	if lookup == nil {
		return errors.New("node restriction: the pod's addresses cannot be checked against its Node here")
	}
	o, err := lookup.Get(ctx, nodesGVR, "", node)
	if err != nil {
		return fmt.Errorf("node restriction: the addresses of pod %s/%s cannot be checked against Node %s: %v", obj.Namespace, obj.Name, node, err)
	}
	n := o.(*corev1.Node)
	var own []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
			if addr, err := netip.ParseAddr(a.Address); err == nil {
				own = append(own, addr.Unmap().String())
			}
		}
	}
	// status.hostIP is where NodePorts and hostPorts of the pod are
	// reached: the Node's own address, nobody else's.
	for _, ip := range hosts {
		if !slices.Contains(own, ip.String()) {
			return fmt.Errorf("node restriction: pod %s/%s reports the host address %s, which is not an address of Node %s (%s)",
				obj.Namespace, obj.Name, ip, node, strings.Join(own, ", "))
		}
	}
	if obj.Spec.HostNetwork {
		for _, ip := range ips {
			if !slices.Contains(own, ip.String()) {
				return fmt.Errorf("node restriction: pod %s/%s uses the host's network, and %s is not an address of Node %s (%s)",
					obj.Namespace, obj.Name, ip, node, strings.Join(own, ", "))
			}
		}
		return nil
	}
	cidrs := n.Spec.PodCIDRs
	if n.Spec.PodCIDR != "" && !slices.Contains(cidrs, n.Spec.PodCIDR) {
		cidrs = append([]string{n.Spec.PodCIDR}, cidrs...)
	}
	for _, ip := range ips {
		in := false
		for _, c := range cidrs {
			if p, err := netip.ParsePrefix(c); err == nil && p.Contains(ip) {
				in = true
				break
			}
		}
		if !in {
			if len(cidrs) == 0 {
				return fmt.Errorf("node restriction: pod %s/%s reports the address %s, but Node %s has no pod CIDR yet", obj.Namespace, obj.Name, ip, node)
			}
			return fmt.Errorf("node restriction: pod %s/%s reports the address %s, outside the pod CIDR of Node %s (%s)",
				obj.Namespace, obj.Name, ip, node, strings.Join(cidrs, ", "))
		}
	}
	return nil
}

// hostIPs are the host addresses in a pod's status, as podIPs.
func hostIPs(p *corev1.Pod) []netip.Addr {
	if p == nil {
		return nil
	}
	fields := []string{p.Status.HostIP}
	for _, ip := range p.Status.HostIPs {
		fields = append(fields, ip.IP)
	}
	return sortedAddrs(fields)
}

// podIPs are the addresses in a pod's status, sorted, without duplicates;
// an unparsable one is kept as the invalid address (never in any range).
func podIPs(p *corev1.Pod) []netip.Addr {
	if p == nil {
		return nil
	}
	fields := []string{p.Status.PodIP}
	for _, ip := range p.Status.PodIPs {
		fields = append(fields, ip.IP)
	}
	return sortedAddrs(fields)
}

// sortedAddrs parses the addresses given, skipping empty ones, and sorts
// them without duplicates. An unparsable one becomes the invalid Addr,
// which no CIDR contains and no Node has: it is refused with the rest.
func sortedAddrs(fields []string) []netip.Addr {
	var out []netip.Addr
	for _, s := range fields {
		if s == "" {
			continue
		}
		a, _ := netip.ParseAddr(s)
		a = a.Unmap()
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// admitEvent: a device writes Events about its own Node (in the namespace
// default, as the kubelet does) and about the pods bound to it (in the
// pod's namespace); an update must also have been about them before.
func admitEvent(ctx context.Context, node string, obj, old *corev1.Event) error {
	for _, e := range []*corev1.Event{old, obj} {
		if e == nil {
			continue
		}
		if err := eventAboutOwn(ctx, node, e); err != nil {
			return err
		}
	}
	return nil
}

func eventAboutOwn(ctx context.Context, node string, e *corev1.Event) error {
	if err := ownObject(ctx, node, e.InvolvedObject, e.Namespace); err != nil {
		return err
	}
	if e.Related != nil {
		// The secondary object an Event points at is one of the
		// device's too; where the Event lives is the involved object's
		// business.
		if err := ownObject(ctx, node, *e.Related, ""); err != nil {
			return fmt.Errorf("%w (the Event's related object)", err)
		}
	}
	return nil
}

// ownObject checks that ref is the device's Node or a pod bound to it;
// with ns set, also that an Event about it lives in the right namespace.
func ownObject(ctx context.Context, node string, ref corev1.ObjectReference, ns string) error {
	switch {
	case ref.Kind == "Node" && (ref.APIVersion == "" || ref.APIVersion == "v1"):
		if ref.Name != node {
			return fmt.Errorf("node restriction: device %s may write Events only about its own Node and pods, not Node %q", node, ref.Name)
		}
		if ns != "" && ns != api.NamespaceDefault {
			return fmt.Errorf("node restriction: Events about Node %s go in the namespace %s, not %q", node, api.NamespaceDefault, ns)
		}
		return nil
	case ref.Kind == "Pod" && (ref.APIVersion == "" || ref.APIVersion == "v1"):
		if ns != "" && ref.Namespace != ns {
			return fmt.Errorf("node restriction: an Event about pod %s/%s goes in the pod's namespace, not %q", ref.Namespace, ref.Name, ns)
		}
		lookup := apiserver.LookupFrom(ctx)
		if lookup == nil {
			return errors.New("node restriction: the Event's pod cannot be checked here")
		}
		o, err := lookup.Get(ctx, podsGVR, ref.Namespace, ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("node restriction: device %s may write Events only about its own Node and pods, and pod %s/%s does not exist", node, ref.Namespace, ref.Name)
			}
			return fmt.Errorf("node restriction: the Event's pod %s/%s cannot be checked: %v", ref.Namespace, ref.Name, err)
		}
		if o.(*corev1.Pod).Spec.NodeName != node {
			return fmt.Errorf("node restriction: device %s may write Events only about its own Node and pods, and pod %s/%s is not bound to it", node, ref.Namespace, ref.Name)
		}
		return nil
	}
	return fmt.Errorf("node restriction: device %s may write Events only about its own Node and pods, not about %s %s/%s", node, ref.Kind, ref.Namespace, ref.Name)
}

func admitNode(ctx context.Context, node string, a apiserver.Attributes, obj, old *corev1.Node) error {
	if obj == nil {
		return fmt.Errorf("node restriction: devices may not delete Nodes")
	}
	if obj.Name != node {
		return fmt.Errorf("node restriction: device %s may register and change only the Node %q, not %q", node, node, obj.Name)
	}
	fp := ""
	if c := apiserver.ClientCertificateFrom(ctx); c != nil {
		fp = CertFingerprint(c)
	}
	if old == nil {
		if err := checkLabels(node, nil, obj.Labels); err != nil {
			return err
		}
		if obj.Spec.PodCIDR != "" || len(obj.Spec.PodCIDRs) > 0 {
			return errors.New("node restriction: the hub allocates the pod CIDR; a device may not set spec.podCIDR")
		}
		// The Node records the key of the device that registered it.
		setAnnotation(obj, AnnotationClientKey, fp)
		delete(obj.Annotations, AnnotationPreviousClientKey)
		return nil
	}
	if err := checkLabels(node, old.Labels, obj.Labels); err != nil {
		return err
	}
	if err := checkTaints(old.Spec.Taints, obj.Spec.Taints); err != nil {
		return err
	}
	was, now := old.Spec.DeepCopy(), obj.Spec.DeepCopy()
	was.Taints, now.Taints = nil, nil
	if !apiequality.Semantic.DeepEqual(was, now) {
		return errors.New("node restriction: devices may not change their Node's spec (pod CIDR, unschedulable, ...), only taints under " + api.NodeLabelPrefix)
	}
	recorded, sent := old.Annotations[AnnotationClientKey], obj.Annotations[AnnotationClientKey]
	switch {
	case recorded == "":
		setAnnotation(obj, AnnotationClientKey, fp)
	case sent == "":
		setAnnotation(obj, AnnotationClientKey, recorded)
	case sent != recorded:
		return fmt.Errorf("node restriction: devices may not change the annotation %s", AnnotationClientKey)
	}
	// The hub's renewal keeps the previous key; a device's update made
	// from an older copy of its Node neither drops nor forges it.
	if prev, ok := old.Annotations[AnnotationPreviousClientKey]; ok {
		if sent, ok := obj.Annotations[AnnotationPreviousClientKey]; ok && sent != prev {
			return fmt.Errorf("node restriction: devices may not change the annotation %s", AnnotationPreviousClientKey)
		}
		setAnnotation(obj, AnnotationPreviousClientKey, prev)
	} else if _, ok := obj.Annotations[AnnotationPreviousClientKey]; ok {
		return fmt.Errorf("node restriction: devices may not set the annotation %s", AnnotationPreviousClientKey)
	}
	return nil
}

func setAnnotation(n *corev1.Node, k, v string) {
	if v == "" {
		return
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[k] = v
}

func checkLabels(node string, old, cur map[string]string) error {
	var changed []string
	for k, v := range cur {
		if ov, ok := old[k]; !ok || ov != v {
			changed = append(changed, k)
		}
	}
	for k := range old {
		if _, ok := cur[k]; !ok {
			changed = append(changed, k)
		}
	}
	sort.Strings(changed)
	for _, k := range changed {
		if k == api.LabelAutonomy {
			return fmt.Errorf("node restriction: devices may not set or change the label %s, which keeps the hub from moving their pods away; an admin sets it (flotilla-hub token create --labels, or kubectl label node %s)", k, node)
		}
		if !NodeMaySetLabel(k) {
			return fmt.Errorf("node restriction: devices may not set or change the label %q, which decides what is scheduled to them; they may set labels under %s and %s, %s, %s",
				k, api.NodeLabelPrefix, api.LabelHostname, api.LabelArch, api.LabelOS)
		}
		if v, ok := cur[k]; ok && k == api.LabelHostname && v != node {
			return fmt.Errorf("node restriction: the label %s must be the Node's name %q, not %q", api.LabelHostname, node, v)
		}
	}
	return nil
}

func checkTaints(old, cur []corev1.Taint) error {
	keep := func(ts []corev1.Taint) []string {
		var out []string
		for _, t := range ts {
			if !strings.HasPrefix(t.Key, api.NodeLabelPrefix) {
				out = append(out, t.Key+"="+t.Value+":"+string(t.Effect))
			}
		}
		sort.Strings(out)
		return out
	}
	if !slices.Equal(keep(old), keep(cur)) {
		return fmt.Errorf("node restriction: devices may not add or remove taints other than under %s: taints decide what is scheduled to them", api.NodeLabelPrefix)
	}
	return nil
}
