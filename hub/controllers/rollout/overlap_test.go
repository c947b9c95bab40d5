package rollout

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/hub/controllers/rollout/waves"
)

func selecting(name string, match map[string]string) *v1alpha1.RolloutPolicy {
	return &v1alpha1.RolloutPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shops", Name: name, Generation: 1},
		Spec: v1alpha1.RolloutPolicySpec{Selector: &metav1.LabelSelector{MatchLabels: match}}}
}

func TestOverlappingPoliciesSayWhoStagesTheWorkload(t *testing.T) {
	kiosks := selecting("a-kiosks", map[string]string{"app": "kiosk"})
	tier := selecting("b-frontend", map[string]string{"tier": "front"})
	policies := []*v1alpha1.RolloutPolicy{tier, kiosks}
	workloads := []workloadLabels{
		{waves.Workload{Kind: "Deployment", Name: "kiosk"}, map[string]string{"app": "kiosk", "tier": "front"}},
		{waves.Workload{Kind: "DaemonSet", Name: "menu"}, map[string]string{"tier": "front"}},
	}

	// b-frontend selects both but stages only menu: kiosk is a-kiosks'.
	var conds []metav1.Condition
	msg := setOverlapping(&conds, 1, ignoredBy(tier, policies, workloads))
	c := meta.FindStatusCondition(conds, v1alpha1.ConditionOverlapping)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonStagedByAnother ||
		!strings.Contains(c.Message, "Deployment kiosk (staged by RolloutPolicy a-kiosks)") || strings.Contains(c.Message, "menu") {
		t.Fatalf("ignored policy's condition: %+v", c)
	}
	if msg != c.Message {
		t.Errorf("event %q, want the condition's message", msg)
	}
	if again := setOverlapping(&conds, 1, ignoredBy(tier, policies, workloads)); again != "" {
		t.Errorf("an unchanged overlap raised another event: %q", again)
	}

	// The policy that stages the workload has nothing to say.
	var own []metav1.Condition
	if setOverlapping(&own, 1, ignoredBy(kiosks, policies, workloads)); len(own) != 0 {
		t.Errorf("staging policy's conditions: %+v", own)
	}

	// Once the selectors no longer overlap, the condition turns False.
	tier.Spec.Selector.MatchLabels = map[string]string{"tier": "front", "app": "menu"}
	workloads[1].labels["app"] = "menu"
	setOverlapping(&conds, 2, ignoredBy(tier, policies, workloads))
	if c := meta.FindStatusCondition(conds, v1alpha1.ConditionOverlapping); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("after the overlap ended: %+v", c)
	}
}
