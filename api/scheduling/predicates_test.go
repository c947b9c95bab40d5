package scheduling

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestToleratesTaint(t *testing.T) {
	taint := corev1.Taint{Key: "pos", Value: "till", Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		tol  corev1.Toleration
		want bool
	}{
		{corev1.Toleration{Key: "pos", Value: "till"}, true},
		{corev1.Toleration{Key: "pos", Value: "other"}, false},
		{corev1.Toleration{Key: "pos", Operator: corev1.TolerationOpExists}, true},
		{corev1.Toleration{Operator: corev1.TolerationOpExists}, true},
		{corev1.Toleration{Key: "pos", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}, false},
		{corev1.Toleration{Key: "other", Operator: corev1.TolerationOpExists}, false},
		{corev1.Toleration{Key: "pos", Operator: "Bogus", Value: "till"}, false},
	} {
		if got := ToleratesTaint(&tc.tol, &taint); got != tc.want {
			t.Errorf("ToleratesTaint(%+v) = %v, want %v", tc.tol, got, tc.want)
		}
	}
	// Only NoSchedule and NoExecute keep pods off.
	taints := []corev1.Taint{{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule}, taint}
	if got, bad := FindUntoleratedTaint(taints, nil); !bad || got.Key != "pos" {
		t.Errorf("FindUntoleratedTaint = %v %v, want the pos taint", got, bad)
	}
	if _, bad := FindUntoleratedTaint(taints, []corev1.Toleration{{Key: "pos", Operator: corev1.TolerationOpExists}}); bad {
		t.Error("a tolerated taint was reported")
	}
}

func TestNodeMatcher(t *testing.T) {
	pod := func(sel map[string]string, terms ...corev1.NodeSelectorTerm) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: sel}}
		if terms != nil {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
		}
		return p
	}
	expr := func(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: op, Values: values}}}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "shop-7", Labels: map[string]string{"site": "north", "cores": "4"}}}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"no constraints", pod(nil), true},
		{"selector matches", pod(map[string]string{"site": "north"}), true},
		{"selector differs", pod(map[string]string{"site": "south"}), false},
		{"terms are ORed", pod(nil, expr("site", corev1.NodeSelectorOpIn, "south"), expr("site", corev1.NodeSelectorOpIn, "north")), true},
		{"NotIn", pod(nil, expr("site", corev1.NodeSelectorOpNotIn, "north")), false},
		{"Exists", pod(nil, expr("cores", corev1.NodeSelectorOpExists)), true},
		{"DoesNotExist", pod(nil, expr("gpu", corev1.NodeSelectorOpDoesNotExist)), true},
		{"Gt", pod(nil, expr("cores", corev1.NodeSelectorOpGt, "2")), true},
		{"Lt", pod(nil, expr("cores", corev1.NodeSelectorOpLt, "2")), false},
		{"Gt with two values never matches", pod(nil, expr("cores", corev1.NodeSelectorOpGt, "2", "3")), false},
		{"an empty term matches nothing", pod(nil, corev1.NodeSelectorTerm{}), false},
		{"selector and affinity both hold", pod(map[string]string{"site": "south"}, expr("cores", corev1.NodeSelectorOpExists)), false},
	} {
		if got := MatchesNodeSelector(tc.pod, node); got != tc.want {
			t.Errorf("%s: MatchesNodeSelector = %v, want %v", tc.name, got, tc.want)
		}
	}
	// A pod pinned by metadata.name (as DaemonSet pods are) names its nodes.
	pinned := pod(nil, corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
		{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"shop-7"}}}})
	m := CompileNodeMatcher(pinned)
	if _, ok := m.Names()["shop-7"]; !ok || len(m.Names()) != 1 || !m.Matches(node.Labels, "shop-7") || m.Matches(node.Labels, "shop-8") {
		t.Errorf("pinned matcher: names %v, matches shop-7 %v, shop-8 %v", m.Names(), m.Matches(node.Labels, "shop-7"), m.Matches(node.Labels, "shop-8"))
	}
	if CompileNodeMatcher(pod(nil, expr("site", corev1.NodeSelectorOpIn, "north"))).Names() != nil {
		t.Error("a matcher on labels claims to name its nodes")
	}
}
