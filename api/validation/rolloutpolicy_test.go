package validation

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"flotilla.dev/flotilla/api/v1alpha1"
)

func validRolloutPolicy() *v1alpha1.RolloutPolicy {
	return defaulted(&v1alpha1.RolloutPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "kiosks", Namespace: "shops"},
		Spec: v1alpha1.RolloutPolicySpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "kiosk"}},
			Waves: []v1alpha1.RolloutWave{
				{Name: "canary", NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}},
				{Name: "ten-percent", Percent: ptrTo(int32(10))},
				{Name: "rest"},
			},
		},
	})
}

func ptrTo[T any](v T) *T { return &v }

func TestValidateRolloutPolicy(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(rp *v1alpha1.RolloutPolicy)
		want   []want
	}{
		{name: "valid", mutate: func(rp *v1alpha1.RolloutPolicy) {}},
		{name: "rollback, percent of failures", mutate: func(rp *v1alpha1.RolloutPolicy) {
			rp.Spec.OnFailure = v1alpha1.RolloutFailureRollback
			rp.Spec.SuccessCriteria.MaxFailures = ptrTo(intstr.FromString("5%"))
		}},
		{name: "no selector", mutate: func(rp *v1alpha1.RolloutPolicy) { rp.Spec.Selector = nil }, want: []want{required("spec.selector")}},
		{name: "empty selector", mutate: func(rp *v1alpha1.RolloutPolicy) { rp.Spec.Selector = &metav1.LabelSelector{} }, want: []want{invalid("spec.selector")}},
		{name: "bad selector", mutate: func(rp *v1alpha1.RolloutPolicy) {
			rp.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}
		}, want: []want{invalid("spec.selector.matchExpressions[0].operator")}},
		{name: "no waves", mutate: func(rp *v1alpha1.RolloutPolicy) { rp.Spec.Waves = nil }, want: []want{required("spec.waves")}},
		{name: "selector and percent", mutate: func(rp *v1alpha1.RolloutPolicy) { rp.Spec.Waves[0].Percent = ptrTo(int32(5)) }, want: []want{forbidden("spec.waves[0].percent")}},
		{name: "percent out of range", mutate: func(rp *v1alpha1.RolloutPolicy) {
			rp.Spec.Waves[1].Percent = ptrTo(int32(0))
			rp.Spec.Waves = append(rp.Spec.Waves[:2], v1alpha1.RolloutWave{Name: "more", Percent: ptrTo(int32(101))}, rp.Spec.Waves[2])
		}, want: []want{invalid("spec.waves[1].percent"), invalid("spec.waves[2].percent")}},
		{name: "duplicate and bad names", mutate: func(rp *v1alpha1.RolloutPolicy) {
			rp.Spec.Waves[1].Name = "canary"
			rp.Spec.Waves[2].Name = "The_Rest"
		}, want: []want{duplicate("spec.waves[1].name"), invalid("spec.waves[2].name")}},
		{name: "unnamed wave", mutate: func(rp *v1alpha1.RolloutPolicy) { rp.Spec.Waves[2].Name = "" }, want: []want{required("spec.waves[2].name")}},
		{name: "catch-all before the last wave", mutate: func(rp *v1alpha1.RolloutPolicy) { rp.Spec.Waves[1].Percent = nil }, want: []want{invalid("spec.waves[1]")}},
		{name: "bad node selector", mutate: func(rp *v1alpha1.RolloutPolicy) {
			rp.Spec.Waves[0].NodeSelector.MatchLabels = map[string]string{"ring": "not a value"}
		}, want: []want{invalid("spec.waves[0].nodeSelector.matchLabels")}},
		{name: "bad maxFailures", mutate: func(rp *v1alpha1.RolloutPolicy) {
			rp.Spec.SuccessCriteria.MaxFailures = ptrTo(intstr.FromString("five"))
		}, want: []want{invalid("spec.successCriteria.maxFailures")}},
		{name: "maxFailures above 100%", mutate: func(rp *v1alpha1.RolloutPolicy) {
			rp.Spec.SuccessCriteria.MaxFailures = ptrTo(intstr.FromString("150%"))
		}, want: []want{invalid("spec.successCriteria.maxFailures")}},
		{name: "negative maxFailures", mutate: func(rp *v1alpha1.RolloutPolicy) { rp.Spec.SuccessCriteria.MaxFailures = ptrTo(intstr.FromInt32(-1)) }, want: []want{invalid("spec.successCriteria.maxFailures")}},
		{name: "bad seconds", mutate: func(rp *v1alpha1.RolloutPolicy) {
			rp.Spec.SuccessCriteria.ReadySeconds = ptrTo(int32(-1))
			rp.Spec.SuccessCriteria.TimeoutSeconds = ptrTo(int32(0))
		}, want: []want{invalid("spec.successCriteria.readySeconds"), invalid("spec.successCriteria.timeoutSeconds")}},
		{name: "unknown onFailure", mutate: func(rp *v1alpha1.RolloutPolicy) { rp.Spec.OnFailure = "Retry" }, want: []want{notSupported("spec.onFailure")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rp := validRolloutPolicy()
			tc.mutate(rp)
			expectErrors(t, ValidateCreate(rp, Options{}), tc.want...)
			old := validRolloutPolicy()
			old.ResourceVersion = "1"
			rp.ResourceVersion = "1"
			expectErrors(t, ValidateUpdate(rp, old, Options{}), tc.want...)
		})
	}
}

func TestValidateRolloutPolicyStatus(t *testing.T) {
	old := validRolloutPolicy()
	old.ResourceVersion = "1"
	rp := old.DeepCopy()
	rp.Status.Workloads = []v1alpha1.WorkloadRollout{
		{Kind: "DaemonSet", Name: "kiosk", Revision: "5d4f", Phase: v1alpha1.RolloutProgressing,
			Waves: []v1alpha1.WaveStatus{{Name: "canary", Devices: 2, Done: 1, Failed: 1, FailedDevices: []v1alpha1.DeviceFailure{{Node: "shop-1", Reason: "CrashLoopBackOff"}}}}},
	}
	expectErrors(t, ValidateStatusUpdate(rp, old))

	bad := old.DeepCopy()
	bad.Status.Workloads = []v1alpha1.WorkloadRollout{
		{Kind: "StatefulSet", Name: "kiosk", Phase: "Stuck",
			Waves: []v1alpha1.WaveStatus{{Name: "canary", Devices: 1, Done: 1, Failed: 1}}},
	}
	expectErrors(t, ValidateStatusUpdate(bad, old),
		notSupported("status.workloads[0].kind"), required("status.workloads[0].revision"), notSupported("status.workloads[0].phase"), invalid("status.workloads[0].waves[0]"))
}
