package ctl

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/v1alpha1"
)

func kioskDaemonSet() *appsv1.DaemonSet {
	labels := map[string]string{"app": "kiosk"}
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kiosk", Labels: labels, Generation: 2},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kiosk", Image: "kiosk:2"}}}}},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 10, CurrentNumberScheduled: 10, UpdatedNumberScheduled: 2, NumberReady: 10, NumberAvailable: 10}}
}

func kioskPolicy(mod func(*v1alpha1.RolloutPolicy)) *v1alpha1.RolloutPolicy {
	rp := &v1alpha1.RolloutPolicy{TypeMeta: metav1.TypeMeta{APIVersion: "flotilla.dev/v1alpha1", Kind: "RolloutPolicy"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kiosks"},
		Spec: v1alpha1.RolloutPolicySpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "kiosk"}},
			Waves: []v1alpha1.RolloutWave{{Name: "canary", NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}}, {Name: "rest"}}},
		Status: v1alpha1.RolloutPolicyStatus{Workloads: []v1alpha1.WorkloadRollout{{Kind: "DaemonSet", Name: "kiosk", ObservedGeneration: 2,
			Revision: "6b9f", RevisionNumber: 2, PreviousRevision: "5c8d", Phase: v1alpha1.RolloutProgressing, CurrentWave: "canary",
			Waves: []v1alpha1.WaveStatus{{Name: "canary", Devices: 2, Done: 1}, {Name: "rest", Devices: 8}}}}}}
	if mod != nil {
		mod(rp)
	}
	return rp
}

func (h *harness) policyPaused() bool {
	h.t.Helper()
	u, err := h.dynamic.Resource(rolloutPolicyGVR).Namespace("default").Get(context.Background(), "kiosks", metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	p, _, _ := unstructured.NestedBool(u.Object, "spec", "paused")
	return p
}

func TestRolloutPauseAndResumeSetThePolicyOfTheWorkload(t *testing.T) {
	h := newHarness(t, kioskDaemonSet(), kioskPolicy(nil))
	out := h.ok("rollout", "pause", "daemonset", "kiosk")
	if !h.policyPaused() || !strings.Contains(out, "rolloutpolicy.flotilla.dev/kiosks paused") || !strings.Contains(out, "daemonset.apps/kiosk") {
		t.Fatalf("pause: paused %t, output %q", h.policyPaused(), out)
	}
	if out := h.ok("rollout", "pause", "ds/kiosk"); !strings.Contains(out, "already paused") {
		t.Errorf("second pause: %q", out)
	}
	h.ok("rollout", "resume", "ds/kiosk")
	if h.policyPaused() {
		t.Fatal("resume left the policy paused")
	}
}

// kioskDeployment is a Deployment the kiosks policy stages (as its status
// from kioskPolicy says, once the workload's kind is Deployment).
func kioskDeployment() *appsv1.Deployment {
	d := deployment("kiosk", 10)
	d.Labels = map[string]string{"app": "kiosk"}
	d.Generation, d.Status.ObservedGeneration, d.Status.UpdatedReplicas = 2, 2, 2
	return d
}

func deploymentWorkload(rp *v1alpha1.RolloutPolicy) { rp.Status.Workloads[0].Kind = "Deployment" }

func TestRolloutPauseAndStatusOfAStagedDeployment(t *testing.T) {
	h := newHarness(t, kioskDeployment(), kioskPolicy(deploymentWorkload))
	out := h.ok("rollout", "pause", "deployment/kiosk")
	if !h.policyPaused() || !strings.Contains(out, "rolloutpolicy.flotilla.dev/kiosks paused") || !strings.Contains(out, "deployment.apps/kiosk") {
		t.Fatalf("pause: paused %t, output %q", h.policyPaused(), out)
	}
	h.ok("rollout", "resume", "deploy", "kiosk")
	if h.policyPaused() {
		t.Fatal("resume left the policy paused")
	}

	if out := h.ok("rollout", "status", "deployment/kiosk", "--watch=false"); !strings.Contains(out, `deployment "kiosk" (revision 2, RolloutPolicy "kiosks")`) || !strings.Contains(out, "waves [canary 1/2], rest 0/8") {
		t.Errorf("progress: %q", out)
	}
	rolledBack := kioskPolicy(func(rp *v1alpha1.RolloutPolicy) {
		deploymentWorkload(rp)
		w := &rp.Status.Workloads[0]
		w.Phase, w.Message = v1alpha1.RolloutRolledBack, "wave canary failed: 1 of 2 devices failed"
		w.Waves[0].Failed = 1
		w.Waves[0].FailedDevices = []v1alpha1.DeviceFailure{{Node: "shop-7", Reason: "CrashLoopBackOff", Message: "kiosk: back-off 10s"}}
	})
	h = newHarness(t, kioskDeployment(), rolledBack)
	_, errOut, code := h.run("rollout", "status", "deployment/kiosk")
	for _, want := range []string{`deployment "kiosk" (revision 2, RolloutPolicy "kiosks") rolled back`, "shop-7 (wave canary): CrashLoopBackOff: kiosk: back-off 10s", "RolloutPolicy default/kiosks"} {
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("exit %d, stderr lacks %q:\n%s", code, want, errOut)
		}
	}
}

func TestRolloutPauseNamesTheMissingPolicy(t *testing.T) {
	h := newHarness(t, kioskDaemonSet(), kioskPolicy(func(rp *v1alpha1.RolloutPolicy) { rp.Spec.Selector.MatchLabels["app"] = "menu" }))
	_, errOut, code := h.run("rollout", "pause", "ds", "kiosk")
	if code == 0 || !strings.Contains(errOut, "no RolloutPolicy in namespace default selects daemonset.apps/kiosk (labels app=kiosk)") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestRolloutPauseWhereGitOwnsTheField(t *testing.T) {
	fromGit := func(manifestSpec string) func(*v1alpha1.RolloutPolicy) {
		return func(rp *v1alpha1.RolloutPolicy) {
			rp.Labels = map[string]string{api.LabelSource: "flotilla-system.default"}
			rp.Annotations = map[string]string{api.AnnotationLastApplied: `{"apiVersion":"flotilla.dev/v1alpha1","kind":"RolloutPolicy","spec":` + manifestSpec + `}`}
		}
	}
	h := newHarness(t, kioskDaemonSet(), kioskPolicy(fromGit(`{"paused":false,"waves":[]}`)))
	_, errOut, code := h.run("rollout", "pause", "ds", "kiosk")
	if code == 0 || h.policyPaused() || !strings.Contains(errOut, "manifest sets spec.paused: false") || !strings.Contains(errOut, "change it in Git") {
		t.Fatalf("exit %d, paused %t, stderr %q", code, h.policyPaused(), errOut)
	}
	h.ok("rollout", "pause", "ds", "kiosk", "--force")
	if !h.policyPaused() {
		t.Fatal("--force did not pause")
	}

	h = newHarness(t, kioskDaemonSet(), kioskPolicy(fromGit(`{"waves":[]}`)))
	if out := h.ok("rollout", "pause", "ds", "kiosk"); !h.policyPaused() || !strings.Contains(out, "syncs keep this setting") {
		t.Fatalf("paused %t, output %q", h.policyPaused(), out)
	}
}

func TestRolloutStatusOfAStagedDaemonSet(t *testing.T) {
	rolledBack := kioskPolicy(func(rp *v1alpha1.RolloutPolicy) {
		w := &rp.Status.Workloads[0]
		w.Phase, w.Message = v1alpha1.RolloutRolledBack, "wave canary failed: 1 of 2 devices failed"
		w.Waves[0].Failed = 1
		w.Waves[0].FailedDevices = []v1alpha1.DeviceFailure{{Node: "shop-7", Reason: "CrashLoopBackOff", Message: "kiosk: back-off 10s"}}
	})
	h := newHarness(t, kioskDaemonSet(), rolledBack)
	_, errOut, code := h.run("rollout", "status", "ds/kiosk")
	for _, want := range []string{`daemon set "kiosk" (revision 2, RolloutPolicy "kiosks") rolled back`, "shop-7 (wave canary): CrashLoopBackOff: kiosk: back-off 10s", "owner: RolloutPolicy default/kiosks"} {
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("exit %d, stderr lacks %q:\n%s", code, want, errOut)
		}
	}

	h = newHarness(t, kioskDaemonSet(), kioskPolicy(nil))
	if out := h.ok("rollout", "status", "ds/kiosk", "--watch=false"); !strings.Contains(out, "waves [canary 1/2], rest 0/8") {
		t.Errorf("progress: %q", out)
	}

	done := kioskDaemonSet()
	done.Status.UpdatedNumberScheduled = 10
	h = newHarness(t, done, kioskPolicy(func(rp *v1alpha1.RolloutPolicy) { rp.Status.Workloads[0].Phase = v1alpha1.RolloutComplete }))
	if out := h.ok("rollout", "status", "ds/kiosk"); !strings.Contains(out, "successfully rolled out through every wave") {
		t.Errorf("complete: %q", out)
	}
}

func TestRolloutStatusNamesTheIgnoringPolicy(t *testing.T) {
	other := kioskPolicy(func(rp *v1alpha1.RolloutPolicy) { rp.Name, rp.Status = "z-everything", v1alpha1.RolloutPolicyStatus{} })
	h := newHarness(t, kioskDaemonSet(), kioskPolicy(nil), other)
	out := h.ok("rollout", "status", "ds/kiosk", "--watch=false")
	if !strings.Contains(out, `RolloutPolicy "z-everything" also selects daemonset kiosk but ignores it: RolloutPolicy "kiosks" (the first by name) stages it`) {
		t.Errorf("output %q", out)
	}
}

func TestRolloutRetryAsksForAFailedWaveOnly(t *testing.T) {
	h := newHarness(t, kioskDaemonSet(), kioskPolicy(nil))
	_, errOut, code := h.run("rollout", "retry", "ds", "kiosk")
	if code == 0 || !strings.Contains(errOut, "has no failed wave to retry: it is Progressing at wave canary") {
		t.Fatalf("retry of a progressing rollout: exit %d, stderr %q", code, errOut)
	}
	failed := func(rp *v1alpha1.RolloutPolicy) {
		w := &rp.Status.Workloads[0]
		w.Phase = v1alpha1.RolloutPaused
		w.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionWaveFailed, Status: metav1.ConditionTrue, Reason: "PausedOnFailure"}}
	}
	h = newHarness(t, kioskDaemonSet(), kioskPolicy(failed))
	if out := h.ok("rollout", "resume", "ds/kiosk"); !strings.Contains(out, "flotctl rollout retry daemonset kiosk judges the wave again") {
		t.Errorf("resume of a failed wave does not point at retry: %q", out)
	}
	out := h.ok("rollout", "retry", "daemonset/kiosk")
	if !strings.Contains(out, "daemonset.apps/kiosk: wave canary of RolloutPolicy kiosks will be judged again") {
		t.Errorf("retry: %q", out)
	}
	ds, err := h.typed.AppsV1().DaemonSets("default").Get(context.Background(), "kiosk", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := ds.Annotations[v1alpha1.AnnotationRolloutRetryRequestedAt]; v == "" {
		t.Fatalf("no retry request on the DaemonSet: %v", ds.Annotations)
	}
}
