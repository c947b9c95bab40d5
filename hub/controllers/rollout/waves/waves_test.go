package waves

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/registry/trust"
)

func ptr[T any](v T) *T { return &v }

func policy(waves ...v1alpha1.RolloutWave) *v1alpha1.RolloutPolicy {
	return &v1alpha1.RolloutPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shops", Name: "kiosks"}, Spec: v1alpha1.RolloutPolicySpec{Waves: waves}}
}

func canary() v1alpha1.RolloutWave {
	return v1alpha1.RolloutWave{Name: "canary", NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}}
}

func fleet(n int, canaries ...int) []*corev1.Node {
	var out []*corev1.Node
	for i := 0; i < n; i++ {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("shop-%03d", i)}}
		for _, c := range canaries {
			if c == i {
				node.Labels = map[string]string{"ring": "canary"}
			}
		}
		out = append(out, node)
	}
	return out
}

func count(m map[string]int) map[int]int {
	out := map[int]int{}
	for _, w := range m {
		out[w]++
	}
	return out
}

func TestAssignTakesSelectorThenPercentOfTheRestThenEveryoneLeft(t *testing.T) {
	rp := policy(canary(), v1alpha1.RolloutWave{Name: "ten", Percent: ptr(int32(10))}, v1alpha1.RolloutWave{Name: "rest"})
	got, err := Assign(rp, "id", fleet(100, 3, 50))
	if err != nil {
		t.Fatal(err)
	}
	// 98 left after the canaries: 10% rounds up to 10.
	if c := count(got); c[0] != 2 || c[1] != 10 || c[2] != 88 || c[None] != 0 {
		t.Fatalf("wave sizes %v, want canary 2, ten 10, rest 88", c)
	}
	if got["shop-003"] != 0 || got["shop-050"] != 0 {
		t.Errorf("canaries in waves %d and %d", got["shop-003"], got["shop-050"])
	}
}

func TestAssignLeavesDevicesNoWaveTakes(t *testing.T) {
	rp := policy(canary(), v1alpha1.RolloutWave{Name: "half", Percent: ptr(int32(50))})
	got, err := Assign(rp, "id", fleet(11, 0))
	if err != nil {
		t.Fatal(err)
	}
	if c := count(got); c[0] != 1 || c[1] != 5 || c[None] != 5 {
		t.Fatalf("wave sizes %v, want canary 1, half 5, none 5", c)
	}
}

func TestPercentWavesPickAStableSpreadSet(t *testing.T) {
	rp := policy(v1alpha1.RolloutWave{Name: "ten", Percent: ptr(int32(10))}, v1alpha1.RolloutWave{Name: "rest"})
	nodes := fleet(200)
	first, _ := Assign(rp, "shops/kiosks/DaemonSet/kiosk", nodes)
	// The same devices in another order pick the same wave.
	reversed := make([]*corev1.Node, len(nodes))
	for i, n := range nodes {
		reversed[len(nodes)-1-i] = n
	}
	again, _ := Assign(rp, "shops/kiosks/DaemonSet/kiosk", reversed)
	for n, w := range first {
		if again[n] != w {
			t.Fatalf("%s moved from wave %d to %d on re-evaluation", n, w, again[n])
		}
	}
	// Not the first 20 names: the hash spreads the wave over the fleet.
	inFirst20 := 0
	for i := 0; i < 20; i++ {
		if first[fmt.Sprintf("shop-%03d", i)] == 0 {
			inFirst20++
		}
	}
	if inFirst20 == 20 {
		t.Error("the percent wave is the first 20 devices by name")
	}
	// Another workload picks another set.
	other, _ := Assign(rp, "shops/kiosks/DaemonSet/printer", nodes)
	same := 0
	for n, w := range first {
		if w == 0 && other[n] == 0 {
			same++
		}
	}
	if same == 20 {
		t.Error("two workloads pick exactly the same canary devices")
	}
}

func status(rev, prev, wave string, phase v1alpha1.RolloutPhase) v1alpha1.WorkloadRollout {
	return v1alpha1.WorkloadRollout{Kind: "DaemonSet", Name: "kiosk", Revision: rev, PreviousRevision: prev, CurrentWave: wave, Phase: phase}
}

func TestPlanFor(t *testing.T) {
	ds := Workload{Kind: "DaemonSet", Name: "kiosk"}
	nodes := fleet(10, 0)
	rp := policy(canary(), v1alpha1.RolloutWave{Name: "half", Percent: ptr(int32(50))}, v1alpha1.RolloutWave{Name: "rest"})
	cases := []struct {
		name     string
		st       []v1alpha1.WorkloadRollout
		rev      string
		nilPlan  bool
		prev     string
		admitted int
	}{
		{name: "not yet seen by the rollout loop", rev: "b", nilPlan: true},
		{name: "complete", st: []v1alpha1.WorkloadRollout{status("b", "a", "", v1alpha1.RolloutComplete)}, rev: "b", nilPlan: true},
		{name: "new template after complete: held on the completed one", st: []v1alpha1.WorkloadRollout{status("b", "a", "", v1alpha1.RolloutComplete)}, rev: "c", prev: "b", admitted: 0},
		{name: "new template after a held rollout: held on the one before it", st: []v1alpha1.WorkloadRollout{status("b", "a", "canary", v1alpha1.RolloutPaused)}, rev: "c", prev: "a", admitted: 0},
		{name: "template back to the stable one", st: []v1alpha1.WorkloadRollout{status("b", "a", "canary", v1alpha1.RolloutRolledBack)}, rev: "a", nilPlan: true},
		{name: "progressing at the second wave", st: []v1alpha1.WorkloadRollout{status("b", "a", "half", v1alpha1.RolloutProgressing)}, rev: "b", prev: "a", admitted: 2},
		{name: "paused at the canary", st: []v1alpha1.WorkloadRollout{status("b", "a", "canary", v1alpha1.RolloutPaused)}, rev: "b", prev: "a", admitted: 1},
		{name: "rolled back at the second wave keeps the canary", st: []v1alpha1.WorkloadRollout{status("b", "a", "half", v1alpha1.RolloutRolledBack)}, rev: "b", prev: "a", admitted: 1},
		{name: "first version of a workload", st: []v1alpha1.WorkloadRollout{status("b", "", "canary", v1alpha1.RolloutProgressing)}, rev: "b", nilPlan: true},
		{name: "wave removed under the rollout", st: []v1alpha1.WorkloadRollout{status("b", "a", "gone", v1alpha1.RolloutProgressing)}, rev: "b", prev: "a", admitted: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := rp.DeepCopy()
			p.Status.Workloads = tc.st
			plan, err := PlanFor(p, ds, tc.rev, nodes)
			if err != nil {
				t.Fatal(err)
			}
			if tc.nilPlan {
				if plan != nil {
					t.Fatalf("plan %+v, want none (every device on %s)", plan, tc.rev)
				}
				return
			}
			if plan == nil {
				t.Fatal("no plan: every device would get the new revision")
			}
			if plan.Previous != tc.prev || plan.Admitted != tc.admitted || plan.Revision != tc.rev {
				t.Fatalf("plan %s from %s admitting %d waves, want %s from %s admitting %d", plan.Revision, plan.Previous, plan.Admitted, tc.rev, tc.prev, tc.admitted)
			}
			admitted := 0
			for _, n := range nodes {
				if plan.Admits(n.Name) {
					admitted++
					if plan.Wave(n.Name) >= tc.admitted {
						t.Errorf("%s of wave %d admitted", n.Name, plan.Wave(n.Name))
					}
				}
			}
			want := map[int]int{0: 0, 1: 1, 2: 6, 3: 10}[tc.admitted]
			if admitted != want {
				t.Errorf("%d devices admitted, want %d", admitted, want)
			}
		})
	}
}

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func pod(rev string, ready bool, since time.Time, mod ...func(*corev1.Pod)) []*corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{appsv1.ControllerRevisionHashLabelKey: rev}}}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.NewTime(since)}}
	for _, m := range mod {
		m(p)
	}
	return []*corev1.Pod{p}
}

func waiting(reason string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "kiosk", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "details"}}}}
	}
}

func TestJudge(t *testing.T) {
	crit := v1alpha1.SuccessCriteria{ReadySeconds: ptr(int32(60)), TimeoutSeconds: ptr(int32(600)), MaxFailures: ptr(intstr.FromInt32(0))}
	devices := []string{"a", "b"}
	cases := []struct {
		name    string
		pods    map[string][]*corev1.Pod
		now     time.Time
		crit    func(*v1alpha1.SuccessCriteria)
		outcome Outcome
		done    int
		reasons []string
		recheck time.Duration
	}{
		{name: "both ready long enough", now: t0.Add(5 * time.Minute),
			pods:    map[string][]*corev1.Pod{"a": pod("new", true, t0.Add(time.Minute)), "b": pod("new", true, t0.Add(2*time.Minute))},
			outcome: Succeeded, done: 2},
		{name: "one ready too briefly", now: t0.Add(150 * time.Second),
			pods:    map[string][]*corev1.Pod{"a": pod("new", true, t0.Add(time.Minute)), "b": pod("new", true, t0.Add(2*time.Minute))},
			outcome: Pending, done: 1, recheck: 30 * time.Second},
		{name: "ready on the old revision does not count", now: t0.Add(5 * time.Minute),
			pods:    map[string][]*corev1.Pod{"a": pod("new", true, t0), "b": pod("old", true, t0)},
			outcome: Pending, done: 1, recheck: 5 * time.Minute},
		{name: "crash loop fails at once", now: t0.Add(time.Minute),
			pods:    map[string][]*corev1.Pod{"a": pod("new", true, t0), "b": pod("new", false, t0, waiting("CrashLoopBackOff"))},
			outcome: Failed, done: 1, reasons: []string{"CrashLoopBackOff"}},
		{name: "a refused signature fails", now: t0.Add(time.Minute),
			pods:    map[string][]*corev1.Pod{"b": pod("new", false, t0, waiting(trust.WaitingReason))},
			outcome: Failed, reasons: []string{trust.WaitingReason}},
		{name: "offline device before the timeout is pending", now: t0.Add(9 * time.Minute),
			pods:    map[string][]*corev1.Pod{"a": pod("new", true, t0)},
			outcome: Pending, done: 1, recheck: time.Minute},
		{name: "offline device after the timeout fails", now: t0.Add(10 * time.Minute),
			pods:    map[string][]*corev1.Pod{"a": pod("new", true, t0)},
			outcome: Failed, done: 1, reasons: []string{"NotReadyInTime"}},
		{name: "ready at the timeout but proving itself is not failed", now: t0.Add(10 * time.Minute),
			pods:    map[string][]*corev1.Pod{"a": pod("new", true, t0), "b": pod("new", true, t0.Add(595*time.Second))},
			outcome: Pending, done: 1, recheck: 55 * time.Second},
		{name: "failures within maxFailures", now: t0.Add(time.Minute),
			crit:    func(c *v1alpha1.SuccessCriteria) { c.MaxFailures = ptr(intstr.FromString("50%")) },
			pods:    map[string][]*corev1.Pod{"a": pod("new", true, t0), "b": pod("new", false, t0, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })},
			outcome: Succeeded, done: 1, reasons: []string{"PodFailed"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := *crit.DeepCopy()
			if tc.crit != nil {
				tc.crit(&c)
			}
			r := Judge(devices, tc.pods, appsv1.ControllerRevisionHashLabelKey, "new", t0, tc.now, c)
			var reasons []string
			for _, f := range r.Failures {
				reasons = append(reasons, f.Reason)
			}
			if r.Outcome != tc.outcome || r.Done != tc.done || fmt.Sprint(reasons) != fmt.Sprint(tc.reasons) || r.RecheckAfter != tc.recheck {
				t.Errorf("outcome %d, done %d, failures %v, recheck %s; want %d, %d, %v, %s", r.Outcome, r.Done, reasons, r.RecheckAfter, tc.outcome, tc.done, tc.reasons, tc.recheck)
			}
		})
	}
}

func TestMaxFailuresRoundsDown(t *testing.T) {
	for _, tc := range []struct {
		v       intstr.IntOrString
		devices int
		want    int
	}{{intstr.FromString("10%"), 5, 0}, {intstr.FromString("10%"), 25, 2}, {intstr.FromInt32(3), 2, 3}, {intstr.FromString("100%"), 7, 7}} {
		if got := MaxFailures(&tc.v, tc.devices); got != tc.want {
			t.Errorf("MaxFailures(%s, %d) = %d, want %d", tc.v.String(), tc.devices, got, tc.want)
		}
	}
}

func TestPausedPlanFreezesTheCurrentWaveOnly(t *testing.T) {
	nodes := fleet(10, 0)
	rp := policy(canary(), v1alpha1.RolloutWave{Name: "half", Percent: ptr(int32(50))}, v1alpha1.RolloutWave{Name: "rest"})
	rp.Status.Workloads = []v1alpha1.WorkloadRollout{status("b", "a", "half", v1alpha1.RolloutPaused)}
	plan, err := PlanFor(rp, Workload{Kind: "DaemonSet", Name: "kiosk"}, "b", nodes)
	if err != nil || plan == nil {
		t.Fatalf("plan %v, %v", plan, err)
	}
	for _, n := range nodes {
		if got, want := plan.Holds(n.Name), plan.Wave(n.Name) == 1; got != want {
			t.Errorf("%s of wave %d: held %t, want %t", n.Name, plan.Wave(n.Name), got, want)
		}
	}
	rp.Status.Workloads[0].Phase = v1alpha1.RolloutProgressing
	plan, _ = PlanFor(rp, Workload{Kind: "DaemonSet", Name: "kiosk"}, "b", nodes)
	for _, n := range nodes {
		if plan.Holds(n.Name) {
			t.Errorf("%s held while progressing", n.Name)
		}
	}
}

func TestPolicyForTakesTheFirstByName(t *testing.T) {
	mk := func(name string, sel map[string]string) *v1alpha1.RolloutPolicy {
		return &v1alpha1.RolloutPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.RolloutPolicySpec{Selector: &metav1.LabelSelector{MatchLabels: sel}}}
	}
	b, a, other := mk("b", map[string]string{"app": "kiosk"}), mk("a", map[string]string{"tier": "edge"}), mk("c", map[string]string{"app": "printer"})
	if got := PolicyFor([]*v1alpha1.RolloutPolicy{other, b, a}, map[string]string{"app": "kiosk", "tier": "edge"}); got != a {
		t.Errorf("got %v, want policy a", got)
	}
	if got := PolicyFor([]*v1alpha1.RolloutPolicy{other, b, a}, map[string]string{"app": "menu"}); got != nil {
		t.Errorf("got %v for an unselected workload", got.Name)
	}
}

func TestSignatureReasonIsTheAgents(t *testing.T) {
	if reasonImageSignature != trust.WaitingReason {
		t.Errorf("the agent reports a refused signature as %q, the criteria look for %q", trust.WaitingReason, reasonImageSignature)
	}
}
