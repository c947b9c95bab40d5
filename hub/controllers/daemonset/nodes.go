package daemonset

import (
	"sort"

	"flotilla.dev/flotilla/api/scheduling"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Taint keys of the tolerations every DaemonSet pod gets.
const (
	TaintNodeNotReady           = "node.kubernetes.io/not-ready"
	TaintNodeUnreachable        = "node.kubernetes.io/unreachable"
	TaintNodeDiskPressure       = "node.kubernetes.io/disk-pressure"
	TaintNodeMemoryPressure     = "node.kubernetes.io/memory-pressure"
	TaintNodePIDPressure        = "node.kubernetes.io/pid-pressure"
	TaintNodeUnschedulable      = "node.kubernetes.io/unschedulable"
	TaintNodeNetworkUnavailable = "node.kubernetes.io/network-unavailable"
)

// AddDaemonTolerations adds the tolerations Kubernetes gives every
// DaemonSet pod: a daemon belongs on its node through node trouble.
func AddDaemonTolerations(spec *corev1.PodSpec) {
	add := func(key string, effect corev1.TaintEffect) {
		for _, t := range spec.Tolerations {
			if t.Key == key && t.Effect == effect && t.Operator == corev1.TolerationOpExists {
				return
			}
		}
		spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: effect})
	}
	add(TaintNodeNotReady, corev1.TaintEffectNoExecute)
	add(TaintNodeUnreachable, corev1.TaintEffectNoExecute)
	add(TaintNodeDiskPressure, corev1.TaintEffectNoSchedule)
	add(TaintNodeMemoryPressure, corev1.TaintEffectNoSchedule)
	add(TaintNodePIDPressure, corev1.TaintEffectNoSchedule)
	add(TaintNodeUnschedulable, corev1.TaintEffectNoSchedule)
	if spec.HostNetwork {
		add(TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule)
	}
}

// PinToNode makes affinity require the node named node (matchFields on
// metadata.name), replacing any required terms: the node was already
// chosen against them.
func PinToNode(affinity *corev1.Affinity, node string) *corev1.Affinity {
	req := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
	}}}
	if affinity == nil {
		affinity = &corev1.Affinity{}
	}
	if affinity.NodeAffinity == nil {
		affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = req
	return affinity
}

// TargetNode is the node a daemon pod is for: its nodeName once bound,
// else the node its affinity pins it to.
func TargetNode(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 {
		return ""
	}
	for _, f := range terms[0].MatchFields {
		if f.Key == metav1.ObjectNameField && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
			return f.Values[0]
		}
	}
	return ""
}

// ShouldRun says whether a daemon pod of ds belongs on node (shouldRun),
// and whether one already there may stay (shouldContinue): a node tainted
// after the fact keeps its pod as long as the NoExecute taints are
// tolerated.
func ShouldRun(ds *appsv1.DaemonSet, node *corev1.Node) (shouldRun, shouldContinue bool) {
	if ds.Spec.Template.Spec.NodeName != "" && ds.Spec.Template.Spec.NodeName != node.Name {
		return false, false
	}
	pod := &corev1.Pod{ObjectMeta: ds.Spec.Template.ObjectMeta, Spec: *ds.Spec.Template.Spec.DeepCopy()}
	pod.Spec.NodeName = node.Name
	AddDaemonTolerations(&pod.Spec)
	if !scheduling.MatchesNodeSelector(pod, node) {
		return false, false
	}
	if _, untolerated := scheduling.FindUntoleratedTaint(node.Spec.Taints, pod.Spec.Tolerations); untolerated {
		var noExec []corev1.Taint
		for _, t := range node.Spec.Taints {
			if t.Effect == corev1.TaintEffectNoExecute {
				noExec = append(noExec, t)
			}
		}
		_, evicting := scheduling.FindUntoleratedTaint(noExec, pod.Spec.Tolerations)
		return false, !evicting
	}
	return true, true
}

// oldestFirst sorts pods by creation, then by phase (a running pod before
// a pending one of the same age), then by name.
func oldestFirst(pods []*corev1.Pod) {
	rank := map[corev1.PodPhase]int{corev1.PodRunning: 0, corev1.PodPending: 1, corev1.PodUnknown: 2}
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := pods[i], pods[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if rank[a.Status.Phase] != rank[b.Status.Phase] {
			return rank[a.Status.Phase] < rank[b.Status.Phase]
		}
		return a.Name < b.Name
	})
}
