package printers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestPodStatusWords(t *testing.T) {
	pod := func(phase corev1.PodPhase, mains ...corev1.ContainerStatus) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: containerSpecs("a")}, Status: corev1.PodStatus{Phase: phase, ContainerStatuses: mains}}
		if len(mains) > 1 {
			p.Spec.Containers = containerSpecs("a", "b")
		}
		return p
	}
	withInit := func(p *corev1.Pod, inits ...corev1.ContainerStatus) *corev1.Pod {
		p.Spec.InitContainers = containerSpecs("i1", "i2")
		p.Status.InitContainerStatuses = inits
		return p
	}
	deleting := func(p *corev1.Pod) *corev1.Pod { p.DeletionTimestamp = ptr(ago(time.Second)); return p }
	reason := func(p *corev1.Pod, r string) *corev1.Pod { p.Status.Reason = r; return p }
	conds := func(p *corev1.Pod, c ...corev1.PodCondition) *corev1.Pod { p.Status.Conditions = c; return p }
	signal := terminated("a", "", 0)
	signal.State.Terminated.Signal = 9

	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		want  string
		ready string
	}{
		{"pending, nothing reported", pod(corev1.PodPending), "Pending", "0/1"},
		{"scheduling gated", conds(pod(corev1.PodPending), corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "SchedulingGated"}), "SchedulingGated", "0/1"},
		{"container creating", pod(corev1.PodPending, waiting("a", "ContainerCreating", 0)), "ContainerCreating", "0/1"},
		{"image pull backoff", pod(corev1.PodPending, waiting("a", "ImagePullBackOff", 0)), "ImagePullBackOff", "0/1"},
		{"err image pull", pod(corev1.PodPending, waiting("a", "ErrImagePull", 0)), "ErrImagePull", "0/1"},
		{"crash loop", pod(corev1.PodRunning, waiting("a", "CrashLoopBackOff", 5)), "CrashLoopBackOff", "0/1"},
		{"running ready", pod(corev1.PodRunning, running("a", true, 0, 0)), "Running", "1/1"},
		{"running, not ready keeps phase", pod(corev1.PodRunning, running("a", false, 0, 0)), "Running", "0/1"},
		{"first container's word wins", pod(corev1.PodRunning, waiting("a", "ImagePullBackOff", 0), waiting("b", "CrashLoopBackOff", 1)), "ImagePullBackOff", "0/2"},
		{"completed", pod(corev1.PodSucceeded, terminated("a", "Completed", 0)), "Completed", "0/1"},
		{"error", pod(corev1.PodFailed, terminated("a", "Error", 1)), "Error", "0/1"},
		{"oom killed", pod(corev1.PodFailed, terminated("a", "OOMKilled", 137)), "OOMKilled", "0/1"},
		{"exit code without reason", pod(corev1.PodFailed, terminated("a", "", 3)), "ExitCode:3", "0/1"},
		{"signal without reason", pod(corev1.PodFailed, signal), "Signal:9", "0/1"},
		{"completed while another runs, ready", conds(pod(corev1.PodRunning, terminated("a", "Completed", 0), running("b", true, 0, 0)), cond(corev1.PodReady, true)), "Running", "1/2"},
		{"completed while another runs, not ready", pod(corev1.PodRunning, terminated("a", "Completed", 0), running("b", true, 0, 0)), "NotReady", "1/2"},
		{"init waiting", withInit(pod(corev1.PodPending, waiting("a", "PodInitializing", 0)), waiting("i1", "", 0)), "Init:0/2", "0/1"},
		{"init second running", withInit(pod(corev1.PodPending), terminated("i1", "Completed", 0), running("i2", false, 0, 0)), "Init:1/2", "0/1"},
		{"init crash loop", withInit(pod(corev1.PodPending), waiting("i1", "CrashLoopBackOff", 4)), "Init:CrashLoopBackOff", "0/1"},
		{"init image pull", withInit(pod(corev1.PodPending), waiting("i1", "ImagePullBackOff", 0)), "Init:ImagePullBackOff", "0/1"},
		{"init failed with reason", withInit(pod(corev1.PodFailed), terminated("i1", "Error", 1)), "Init:Error", "0/1"},
		{"init failed without reason", withInit(pod(corev1.PodFailed), terminated("i1", "", 2)), "Init:ExitCode:2", "0/1"},
		{"init done, main initialising", withInit(pod(corev1.PodPending, waiting("a", "PodInitializing", 0)), terminated("i1", "Completed", 0), terminated("i2", "Completed", 0)), "PodInitializing", "0/1"},
		{"terminating", deleting(pod(corev1.PodRunning, running("a", true, 0, 0))), "Terminating", "1/1"},
		{"deleted after success stays completed", deleting(pod(corev1.PodSucceeded, terminated("a", "Completed", 0))), "Completed", "0/1"},
		{"node lost", reason(pod(corev1.PodRunning, running("a", true, 0, 0)), NodeLostReason), "NodeLost", "1/1"},
		{"node lost and deleted", deleting(reason(pod(corev1.PodRunning, running("a", true, 0, 0)), NodeLostReason)), "Unknown", "1/1"},
		{"phase unknown", pod(corev1.PodUnknown), "Unknown", "0/1"},
		{"evicted", reason(pod(corev1.PodFailed), "Evicted"), "Evicted", "0/1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := SummarizePod(tc.pod)
			if s.Status != tc.want {
				t.Errorf("status %q, want %q", s.Status, tc.want)
			}
			if got := podCells(tc.pod, now)[1]; got != tc.ready {
				t.Errorf("ready %q, want %q", got, tc.ready)
			}
		})
	}
}

func TestPodSidecarsAndRestarts(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	p := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init"}, {Name: "proxy", RestartPolicy: &always}},
		Containers:     containerSpecs("a"),
	}, Status: corev1.PodStatus{
		Phase:                 corev1.PodRunning,
		Conditions:            []corev1.PodCondition{cond(corev1.PodInitialized, true), cond(corev1.PodReady, true)},
		InitContainerStatuses: []corev1.ContainerStatus{func() corev1.ContainerStatus { s := terminated("init", "Completed", 0); s.RestartCount = 7; return s }(), running("proxy", true, 2, 10*time.Minute)},
		ContainerStatuses:     []corev1.ContainerStatus{running("a", true, 1, 3*time.Minute)},
	}}
	s := SummarizePod(p)
	// The init container's restarts no longer count once initialised; the
	// sidecar's do, and it counts as a container.
	if s.Status != "Running" || s.Ready != 2 || s.Total != 2 || s.Restarts != 3 {
		t.Errorf("summary %+v, want Running 2/2 with 3 restarts", s)
	}
	if want := now.Add(-3 * time.Minute); !s.LastRestart.Equal(want) {
		t.Errorf("last restart %v, want %v", s.LastRestart, want)
	}
	if got := podCells(p, now)[3]; got != "3 (3m ago)" {
		t.Errorf("restarts cell %q", got)
	}

	// While still initialising, init restarts are what counts.
	p.Status.Conditions = nil
	p.Status.InitContainerStatuses[0] = waiting("init", "CrashLoopBackOff", 7)
	if s := SummarizePod(p); s.Status != "Init:CrashLoopBackOff" || s.Restarts != 7 {
		t.Errorf("initialising summary %+v", s)
	}
	if got := podCells(p, now)[3]; got != "7" {
		t.Errorf("restarts without a termination time %q, want plain count", got)
	}
}
