package deployment

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/hub/controllers/rollout/waves"
)

// stagedPlan is the plan of Deployment web rolling "new" out from "old"
// over n1 (the canary) and n2..n4, at the canary wave in phase.
func stagedPlan(t *testing.T, phase v1alpha1.RolloutPhase) *waves.Plan {
	t.Helper()
	rp := &v1alpha1.RolloutPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
		Spec: v1alpha1.RolloutPolicySpec{Waves: []v1alpha1.RolloutWave{
			{Name: "canary", NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}},
			{Name: "rest"},
		}},
		Status: v1alpha1.RolloutPolicyStatus{Workloads: []v1alpha1.WorkloadRollout{{
			Kind: "Deployment", Name: "web", Revision: "new", PreviousRevision: "old", Phase: phase, CurrentWave: "canary",
		}}},
	}
	var nodes []*corev1.Node
	for i, name := range []string{"n1", "n2", "n3", "n4"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if i == 0 {
			n.Labels["ring"] = "canary"
		}
		nodes = append(nodes, n)
	}
	plan, err := waves.PlanFor(rp, waves.Workload{Kind: "Deployment", Name: "web"}, "new", nodes)
	if err != nil || plan == nil {
		t.Fatalf("plan %v, %v", plan, err)
	}
	return plan
}

func revPod(name, hash, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: hash}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func names(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func TestStagedScaleCap(t *testing.T) {
	progressing := stagedPlan(t, v1alpha1.RolloutProgressing)
	one := []*corev1.Pod{revPod("o1", "old", "n1"), revPod("o2", "old", "n2"), revPod("o3", "old", "n3"), revPod("o4", "old", "n4")}
	for _, tc := range []struct {
		name      string
		plan      *waves.Plan
		pods      []*corev1.Pod
		want      int32
		misplaced []string
	}{
		{"a wave admitted: its device's replica may change", progressing, one, 1, []string{"o1"}},
		{"a new pod on the canary does not raise the cap", progressing,
			append(append([]*corev1.Pod(nil), one...), revPod("n1", "new", "n1")), 1, []string{"o1"}},
		{"nor does the old pod's going", progressing,
			[]*corev1.Pod{revPod("n1", "new", "n1"), revPod("o2", "old", "n2"), revPod("o3", "old", "n3"), revPod("o4", "old", "n4")}, 1, nil},
		{"an old pod waiting for a node will go to a later wave's", progressing,
			[]*corev1.Pod{revPod("n1", "new", "n1"), revPod("o2", "old", "n2"), revPod("o3", "old", "n3"), revPod("o4", "old", "")}, 1, nil},
		{"a terminating pod counts for nothing", progressing,
			[]*corev1.Pod{revPod("n1", "new", "n1"), revPod("o2", "old", "n2"), revPod("o3", "old", "n3"), func() *corev1.Pod {
				p := revPod("o4", "old", "n4")
				p.DeletionTimestamp = &metav1.Time{}
				return p
			}()}, 2, nil},
		{"a rolled-back canary gives its replica back", stagedPlan(t, v1alpha1.RolloutRolledBack),
			[]*corev1.Pod{revPod("n1", "new", "n1"), revPod("o2", "old", "n2"), revPod("o3", "old", "n3"), revPod("o4", "old", "n4")}, 0, []string{"n1"}},
		{"a held wave keeps whichever its devices run", stagedPlan(t, v1alpha1.RolloutPaused),
			[]*corev1.Pod{revPod("o1", "old", "n1"), revPod("n1", "new", "n1"), revPod("o2", "old", "n2"), revPod("o3", "old", "n3")}, 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := place(tc.pods, tc.plan)
			if got := NewTarget(4, pl); got != tc.want {
				t.Errorf("new ReplicaSet may have %d, want %d", got, tc.want)
			}
			if got := names(pl.misplaced); len(got) != len(tc.misplaced) || (len(got) > 0 && got[0] != tc.misplaced[0]) {
				t.Errorf("misplaced %v, want %v", got, tc.misplaced)
			}
		})
	}
}
