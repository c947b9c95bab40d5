package scheduler

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// fakePlacement allows the listed nodes to pods named in it.
type fakePlacement struct {
	allowed map[string]map[string]struct{}
	err     error
}

func (f *fakePlacement) AllowedNodes(pod *corev1.Pod) (map[string]struct{}, bool, error) {
	if f.err != nil {
		return nil, false, f.err
	}
	a, ok := f.allowed[pod.Name]
	return a, ok, nil
}

func set(names ...string) map[string]struct{} {
	out := map[string]struct{}{}
	for _, n := range names {
		out[n] = struct{}{}
	}
	return out
}

func TestPlacementNarrowsWherePodsGo(t *testing.T) {
	c := NewCache(CacheConfig{})
	for _, n := range []string{"a", "b", "c", "d"} {
		// d is the emptiest: the scorer would pick it first.
		cpu := "2"
		if n == "d" {
			cpu = "8"
		}
		c.SetNode(node(n, cpu, "4Gi", 110, withLabel("zone", map[bool]string{true: "x", false: "y"}[n != "c"])))
	}
	f := &fakePlacement{allowed: map[string]map[string]struct{}{
		"wave":     set("b", "c"),
		"affinity": set("b", "c"),
		"nowhere":  set(),
	}}
	s := &Scheduler{cfg: Config{Placement: f}, cache: c}

	for range 4 {
		p := pod("wave", "100m", "")
		got, err := s.scheduleWithin(p)
		if err != nil {
			t.Fatal(err)
		}
		if got != "b" && got != "c" {
			t.Fatalf("a pod allowed on b and c went to %s", got)
		}
		c.Forget(p)
	}
	// The pod's own affinity still holds: zone y is only c.
	p := pod("affinity", "100m", "", func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"y"}}}}},
		}}}
	})
	if got, err := s.scheduleWithin(p); err != nil || got != "c" {
		t.Errorf("got %q, %v; want c (zone y and allowed)", got, err)
	}
	if p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields != nil {
		t.Error("the narrowing was written into the pod itself")
	}
	// Allowed nowhere: a fit error that names node affinity.
	_, err := s.scheduleWithin(pod("nowhere", "100m", ""))
	var fit *FitError
	if !errors.As(err, &fit) || !strings.Contains(fit.Error(), ReasonNodeAffinity) {
		t.Errorf("allowed nowhere: %v", err)
	}
	// Pods the placement does not restrict go where the scorer says.
	if got, err := s.scheduleWithin(pod("free", "100m", "")); err != nil || got != "d" {
		t.Errorf("an unrestricted pod went to %q (%v), want d", got, err)
	}
	// A placement that cannot answer is an error, not a free pass.
	s.cfg.Placement = &fakePlacement{err: errors.New("not synced")}
	if _, err := s.scheduleWithin(pod("wave", "100m", "")); err == nil {
		t.Error("no error when the placement could not answer")
	}
}

// scheduleWithin places pod as scheduleOne does: narrowed, then scheduled.
func (s *Scheduler) scheduleWithin(pod *corev1.Pod) (string, error) {
	target, err := s.placed(pod)
	if err != nil {
		return "", err
	}
	return s.cache.Schedule(target)
}
