package scheduler

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// Placement narrows where a pod may go beyond what its own spec says: a
// staged rollout (package rollout's DeploymentGate) keeps a Deployment's
// new template on the devices of the waves it has admitted.
type Placement interface {
	// AllowedNodes returns the nodes pod may be bound to; restricted is
	// false when the pod may go anywhere its spec allows.
	AllowedNodes(pod *corev1.Pod) (allowed map[string]struct{}, restricted bool, err error)
}

// placed is pod as the scheduler places it: narrowed by the configured
// Placement. The narrowing is a required node affinity term on
// metadata.name, ANDed with the pod's own, on a copy the scheduler alone
// sees: the filters, preemption's search and the fit error treat it as any
// node affinity (and the scan looks only at the named nodes, as for a
// DaemonSet's pods), and nothing of it is written back.
func (s *Scheduler) placed(pod *corev1.Pod) (*corev1.Pod, error) {
	if s.cfg.Placement == nil {
		return pod, nil
	}
	allowed, restricted, err := s.cfg.Placement.AllowedNodes(pod)
	if err != nil {
		return nil, fmt.Errorf("placement of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if !restricted {
		return pod, nil
	}
	return narrowed(pod, allowed), nil
}

// narrowed is a copy of pod that only the allowed nodes match.
func narrowed(pod *corev1.Pod, allowed map[string]struct{}) *corev1.Pod {
	names := make([]string, 0, len(allowed))
	for n := range allowed {
		names = append(names, n)
	}
	sort.Strings(names)
	req := corev1.NodeSelectorRequirement{Key: metadataName, Operator: corev1.NodeSelectorOpIn, Values: names}
	cp := pod.DeepCopy()
	if cp.Spec.Affinity == nil {
		cp.Spec.Affinity = &corev1.Affinity{}
	}
	if cp.Spec.Affinity.NodeAffinity == nil {
		cp.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := cp.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}
	}
	// Terms are ORed: the name must be added to each.
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		terms[i].MatchFields = append(terms[i].MatchFields, req)
	}
	return cp
}

// metadataName is the one node field a matchFields requirement may name.
const metadataName = "metadata.name"
