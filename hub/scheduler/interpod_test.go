package scheduler

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func withLabels(kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

func term(key string, app string) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}
}

func antiAffinity(terms ...corev1.PodAffinityTerm) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: terms}
	}
}

func podAffinity(terms ...corev1.PodAffinityTerm) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: terms}
	}
}

func spreadOver(key string, skew int32, when corev1.UnsatisfiableConstraintAction, app string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
			TopologyKey: key, MaxSkew: skew, WhenUnsatisfiable: when,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}})
	}
}

func fitError(t *testing.T, err error) *FitError {
	t.Helper()
	var fe *FitError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want a FitError", err)
	}
	return fe
}

// TestOneReplicaPerDevice: required anti-affinity on the hostname keeps
// replicas apart; the fourth of three devices' worth waits with
// kube-scheduler's reason.
func TestOneReplicaPerDevice(t *testing.T) {
	c := newTestCache(node("a", "4", "4Gi", 110), node("b", "4", "4Gi", 110), node("c", "4", "4Gi", 110))
	seen := map[string]bool{}
	for i := range 3 {
		n, err := c.Schedule(pod("web", "100m", "", withLabels("app", "web"), withOwner("rs-web"), antiAffinity(term(corev1.LabelHostname, "web"))))
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		if seen[n] {
			t.Fatalf("replica %d on %s, which already runs one", i, n)
		}
		seen[n] = true
	}
	_, err := c.Schedule(pod("web", "100m", "", withLabels("app", "web"), withOwner("rs-web"), antiAffinity(term(corev1.LabelHostname, "web"))))
	if got := fitError(t, err).Error(); got != "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules." {
		t.Errorf("fourth replica: %q", got)
	}
	// Symmetry: a pod the existing replicas' anti-affinity names cannot
	// join them either, although it has no rule of its own.
	_, err = c.Schedule(pod("intruder", "", "", withLabels("app", "web")))
	if got := fitError(t, err).Error(); !strings.Contains(got, "3 node(s) didn't satisfy existing pods anti-affinity rules") {
		t.Errorf("a pod matching the replicas' anti-affinity: %q", got)
	}
	// Others are unaffected.
	if _, err := c.Schedule(pod("other", "", "", withLabels("app", "db"))); err != nil {
		t.Errorf("an unrelated pod: %v", err)
	}
}

func TestPodAffinityFollowsItsPeer(t *testing.T) {
	zone := corev1.LabelTopologyZone
	c := newTestCache(node("a", "4", "4Gi", 110, withLabel(zone, "north")), node("b", "4", "4Gi", 110, withLabel(zone, "south")),
		node("c", "4", "4Gi", 110, withLabel(zone, "south")))
	// No cache pod yet: a pod that asks to be near another kind waits.
	_, err := c.Schedule(pod("api", "", "", withLabels("app", "api"), podAffinity(term(zone, "db"))))
	if got := fitError(t, err).Error(); got != "0/3 nodes are available: 3 node(s) didn't match pod affinity rules." {
		t.Errorf("no db anywhere: %q", got)
	}
	// The first of a group that asks to be near its own kind goes anywhere.
	first, err := c.Schedule(pod("db", "", "", withLabels("app", "db"), podAffinity(term(zone, "db"))))
	if err != nil {
		t.Fatalf("the first db: %v", err)
	}
	want := map[string]string{"a": "north", "b": "south", "c": "south"}[first]
	for i := range 5 {
		n, err := c.Schedule(pod("api", "", "", withLabels("app", "api"), podAffinity(term(zone, "db"))))
		if err != nil {
			t.Fatal(err)
		}
		if got := map[string]string{"a": "north", "b": "south", "c": "south"}[n]; got != want {
			t.Fatalf("api %d in zone %s, the db is in %s", i, got, want)
		}
	}
}

// TestTopologySpread: DoNotSchedule keeps the skew between sites within
// maxSkew; a node without the key is not a candidate; ScheduleAnyway only
// prefers.
func TestTopologySpread(t *testing.T) {
	zone := corev1.LabelTopologyZone
	c := newTestCache(node("a1", "8", "8Gi", 110, withLabel(zone, "north")), node("a2", "8", "8Gi", 110, withLabel(zone, "north")),
		node("b1", "8", "8Gi", 110, withLabel(zone, "south")), node("x", "8", "8Gi", 110))
	perZone := map[string]int{}
	for i := range 6 {
		n, err := c.Schedule(pod("kiosk", "", "", withLabels("app", "kiosk"), spreadOver(zone, 1, corev1.DoNotSchedule, "kiosk")))
		if err != nil {
			t.Fatalf("kiosk %d: %v", i, err)
		}
		if n == "x" {
			t.Fatalf("kiosk %d on x, which has no %s", i, zone)
		}
		perZone[map[string]string{"a1": "north", "a2": "north", "b1": "south"}[n]]++
		if d := perZone["north"] - perZone["south"]; d > 1 || d < -1 {
			t.Fatalf("after %d kiosks: %v, skew over 1", i+1, perZone)
		}
	}
	// South full (one node, pod limit): north may get only one more.
	c2 := newTestCache(node("a1", "8", "8Gi", 110, withLabel(zone, "north")), node("b1", "8", "8Gi", 1, withLabel(zone, "south")),
		node("x", "8", "8Gi", 110))
	for range 3 {
		_, _ = c2.Schedule(pod("kiosk", "", "", withLabels("app", "kiosk"), spreadOver(zone, 1, corev1.DoNotSchedule, "kiosk")))
	}
	_, err := c2.Schedule(pod("kiosk", "", "", withLabels("app", "kiosk"), spreadOver(zone, 1, corev1.DoNotSchedule, "kiosk")))
	got := fitError(t, err).Error()
	for _, want := range []string{"1 node(s) didn't match pod topology spread constraints,", "1 node(s) didn't match pod topology spread constraints (missing required label)", "1 Too many pods"} {
		if !strings.Contains(got, want) {
			t.Errorf("when spreading cannot hold: %q, want %q in it", got, want)
		}
	}
	// ScheduleAnyway prefers the emptier rack but never refuses. Each pod
	// has labels of its own, so the workload spreading does not group
	// them: only the constraint balances the racks (3 nodes against 1).
	c3 := newTestCache(node("r1a", "8", "8Gi", 110, withLabel("rack", "r1")), node("r1b", "8", "8Gi", 110, withLabel("rack", "r1")),
		node("r1c", "8", "8Gi", 110, withLabel("rack", "r1")), node("r2a", "8", "8Gi", 110, withLabel("rack", "r2")))
	counts := map[string]int{}
	for i := range 10 {
		n, err := c3.Schedule(pod("kiosk", "100m", "", withLabels("app", "kiosk", "n", string(rune('a'+i))), spreadOver("rack", 1, corev1.ScheduleAnyway, "kiosk")))
		if err != nil {
			t.Fatal(err)
		}
		counts[n[:2]]++
	}
	if counts["r2"] < 4 {
		t.Errorf("ScheduleAnyway placed %v: rack r2 (one node) should get about half, as the racks balance", counts)
	}
}

func TestPreferredNodeAffinity(t *testing.T) {
	c := newTestCache(node("a", "4", "4Gi", 110, withLabel("tier", "fast")), node("b", "4", "4Gi", 110), node("c", "4", "4Gi", 110))
	prefer := func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "tier", Operator: corev1.NodeSelectorOpIn, Values: []string{"fast"}}}}}}}}
	}
	for i := range 5 {
		n, err := c.Schedule(pod("p", "100m", "", prefer))
		if err != nil {
			t.Fatal(err)
		}
		if n != "a" {
			t.Fatalf("pod %d on %s, the preferred node is a", i, n)
		}
	}
}
