package scheduler

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestPreemptPicksTheCheapestVictims(t *testing.T) {
	c := newTestCache(node("n1", "2", "8Gi", 10), node("n2", "2", "8Gi", 10), node("n3", "2", "8Gi", 10, withLabel("x", "y")))
	c.SetPod(bound(pod("n1-low", "1", "", withPriority(1)), "n1"))
	c.SetPod(bound(pod("n1-mid", "1", "", withPriority(5)), "n1"))
	c.SetPod(bound(pod("n2-high", "2", "", withPriority(10)), "n2"))
	c.SetPod(bound(pod("n3-equal", "2", "", withPriority(20)), "n3"))

	p := pod("urgent", "1", "", withPriority(20))
	if _, err := c.Schedule(p); err == nil {
		t.Fatal("the pod fits without preemption; the test needs full nodes")
	}
	pr := c.Preempt(p)
	// n1 needs one victim of priority 1 (the priority-5 pod is
	// reprieved), n2 one of 10, n3 none would do (same priority).
	if pr.Node != "n1" || len(pr.Victims) != 1 || pr.Victims[0].Name != "n1-low" || pr.Message != "" {
		t.Fatalf("Preempt = %+v, want n1 evicting n1-low only", pr)
	}
	// The cache is as it was: still no room.
	if _, err := c.Schedule(p); err == nil {
		t.Fatal("the dry run left room behind")
	}
}

func TestPreemptMessages(t *testing.T) {
	c := newTestCache(node("full", "1", "8Gi", 10), node("tainted", "4", "8Gi", 10, withTaint("dedicated", "gpu", corev1.TaintEffectNoSchedule)))
	c.SetPod(bound(pod("same", "1", "", withPriority(7)), "full"))
	p := pod("p", "1", "", withPriority(7))
	_, err := c.Schedule(p)
	got := PreemptionMessage(err, c.Preempt(p))
	want := "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: gpu}." +
		" preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."
	if got != want {
		t.Errorf("message\n%q, want\n%q", got, want)
	}

	never := corev1.PreemptNever
	p = pod("polite", "1", "", withPriority(100), func(p *corev1.Pod) { p.Spec.PreemptionPolicy = &never })
	_, err = c.Schedule(p)
	pr := c.Preempt(p)
	if pr.Node != "" || PreemptionMessage(err, pr) != "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: gpu}. preemption: not eligible due to preemptionPolicy=Never." {
		t.Errorf("preemptionPolicy Never: %+v %q", pr, PreemptionMessage(err, pr))
	}
}

func TestNominatedRoomIsNotTakenByLowerPriority(t *testing.T) {
	c := newTestCache(node("n1", "2", "8Gi", 10))
	high := pod("high", "2", "", withPriority(100))
	c.Nominate(high, "n1")
	if n, err := c.Schedule(pod("low", "1", "", withPriority(1))); err == nil {
		t.Fatalf("a lower-priority pod took the nominated room on %s", n)
	}
	if n, err := c.Schedule(high); err != nil || n != "n1" {
		t.Fatalf("the nominated pod itself: %q %v", n, err)
	}
}

func TestSchedulerPreemptsAndBinds(t *testing.T) {
	low := bound(pod("low", "2", "", withPriority(0)), "n1")
	h := startScheduler(t, node("n1", "2", "8Gi", 10), low)
	high := pod("high", "2", "", withPriority(1000))
	if _, err := h.client.CoreV1().Pods("default").Create(context.Background(), high, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, h.recorder, fmt.Sprintf("Normal Preempted Preempted by pod %s on node n1", high.UID))
	got := h.waitPod(t, "high", func(p *corev1.Pod) bool { return p.Spec.NodeName == "n1" })
	if got.Status.NominatedNodeName != "n1" {
		t.Errorf("nominatedNodeName %q, want n1", got.Status.NominatedNodeName)
	}
	// The victim was marked before it went, as kube-scheduler marks it.
	var marked bool
	for _, a := range h.client.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" {
			if p, ok := a.(interface{ GetObject() runtime.Object }).GetObject().(*corev1.Pod); ok && p.Name == "low" {
				for _, c := range p.Status.Conditions {
					marked = marked || c.Type == corev1.DisruptionTarget && c.Reason == corev1.PodReasonPreemptionByScheduler &&
						c.Message == "default-scheduler: preempting to accommodate a higher priority pod"
				}
			}
		}
	}
	if !marked {
		t.Error("the victim never got DisruptionTarget=True (PreemptionByScheduler)")
	}
}
