package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"flotilla.dev/flotilla/hub/scheduler/schedulertest"
)

type harness struct {
	client   *fake.Clientset
	binder   *schedulertest.Binder
	recorder *record.FakeRecorder
	sched    *Scheduler
	cancel   context.CancelFunc
	done     chan error
}

func startScheduler(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	client, binder := schedulertest.NewClientset(objs...)
	return startWith(t, client, binder)
}

func startWith(t *testing.T, client *fake.Clientset, binder *schedulertest.Binder) *harness {
	t.Helper()
	h := &harness{client: client, binder: binder, recorder: record.NewFakeRecorder(1000), done: make(chan error, 1)}
	factory := informers.NewSharedInformerFactory(client, 0)
	s, err := New(client, factory, Config{
		Recorder:       h.recorder,
		InitialBackoff: 5 * time.Millisecond,
		MaxBackoff:     50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.sched = s
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-h.done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return h
}

func (h *harness) waitPod(t *testing.T, name string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := h.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("pod %s never reached the expected state; last: nodeName=%q conditions=%+v", name, last.Spec.NodeName, last.Status.Conditions)
	}
	return last
}

func isBound(p *corev1.Pod) bool { return p.Spec.NodeName != "" }

func isUnschedulable(p *corev1.Pod) bool {
	c := podScheduledCondition(p)
	return c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
}

func TestSchedulerBindsAndAssumes(t *testing.T) {
	h := startScheduler(t,
		node("n1", "1", "1Gi", 10), node("n2", "1", "1Gi", 10),
		pod("a", "1", ""), pod("b", "1", ""))
	a := h.waitPod(t, "a", isBound)
	b := h.waitPod(t, "b", isBound)
	if a.Spec.NodeName == b.Spec.NodeName {
		t.Fatalf("both 1-cpu pods bound to %s, which has 1 cpu", a.Spec.NodeName)
	}
	wantEvent(t, h.recorder, "Normal Scheduled Successfully assigned default/a to "+a.Spec.NodeName)
}

func wantEvent(t *testing.T, rec *record.FakeRecorder, want string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	var seen []string
	for {
		select {
		case e := <-rec.Events:
			if e == want {
				return
			}
			seen = append(seen, e)
		case <-timeout:
			t.Fatalf("event %q not recorded; saw %q", want, seen)
		}
	}
}

func TestSchedulerUnschedulableThenNodeArrives(t *testing.T) {
	h := startScheduler(t,
		node("small", "4", "1Gi", 10),
		node("gone", "4", "8Gi", 10, withTaint(unreachable, "", corev1.TaintEffectNoSchedule), notReady),
		pod("big", "1", "4Gi"))
	p := h.waitPod(t, "big", isUnschedulable)
	want := "0/2 nodes are available: 1 Insufficient memory, 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }." +
		" preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."
	if msg := podScheduledCondition(p).Message; msg != want {
		t.Errorf("condition message %q, want %q", msg, want)
	}
	wantEvent(t, h.recorder, "Warning FailedScheduling "+want)

	if _, err := h.client.CoreV1().Nodes().Create(context.Background(), node("roomy", "4", "8Gi", 10), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p = h.waitPod(t, "big", isBound)
	if p.Spec.NodeName != "roomy" {
		t.Fatalf("bound to %s, want roomy", p.Spec.NodeName)
	}
}

func TestSchedulerRetriesWhenBoundPodLeaves(t *testing.T) {
	h := startScheduler(t, node("n1", "1", "1Gi", 10), bound(pod("old", "1", ""), "n1"), pod("new", "1", ""))
	h.waitPod(t, "new", isUnschedulable)
	if err := h.client.CoreV1().Pods("default").Delete(context.Background(), "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := h.waitPod(t, "new", isBound); p.Spec.NodeName != "n1" {
		t.Fatalf("bound to %q", p.Spec.NodeName)
	}
}

func TestSchedulerForgetsFailedBinding(t *testing.T) {
	client, binder := schedulertest.NewClientset(node("n1", "1", "1Gi", 10), pod("a", "1", ""))
	var failures atomic.Int32
	client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() == "binding" && failures.Add(1) <= 2 {
			return true, nil, apierrors.NewInternalError(errors.New("store unavailable"))
		}
		return false, nil, nil
	})
	h := startWith(t, client, binder)
	if p := h.waitPod(t, "a", isBound); p.Spec.NodeName != "n1" {
		t.Fatalf("bound to %q", p.Spec.NodeName)
	}
	wantEvent(t, h.recorder, "Warning FailedScheduling Binding rejected: Internal error occurred: store unavailable")
	// Had the failed attempts not been forgotten, the node would look full.
	if h.sched.Cache().IsAssumed(pod("a", "", "")) {
		t.Error("unexpected assumed pod")
	}
	if _, err := h.client.CoreV1().Pods("default").Create(context.Background(), pod("zero", "", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitPod(t, "zero", isBound)
}

func TestSchedulerIgnoresOtherSchedulersAndTerminating(t *testing.T) {
	other := pod("other", "", "", func(p *corev1.Pod) { p.Spec.SchedulerName = "someone-else" })
	h := startScheduler(t, node("n1", "1", "1Gi", 10), other, pod("mine", "", ""))
	h.waitPod(t, "mine", isBound)
	p, err := h.client.CoreV1().Pods("default").Get(context.Background(), "other", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" || len(p.Status.Conditions) != 0 {
		t.Fatalf("pod for another scheduler was touched: %+v", p.Status)
	}
}

func TestSchedulerNoNodes(t *testing.T) {
	h := startScheduler(t, pod("p", "", ""))
	p := h.waitPod(t, "p", isUnschedulable)
	if msg := podScheduledCondition(p).Message; msg != "no nodes available to schedule pods" {
		t.Fatalf("message %q", msg)
	}
	if _, err := h.client.CoreV1().Nodes().Create(context.Background(), node("n1", "1", "1Gi", 10), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitPod(t, "p", isBound)
}

func TestConfigValidation(t *testing.T) {
	client := fake.NewSimpleClientset()
	f := informers.NewSharedInformerFactory(client, 0)
	_, err := New(client, f, Config{InitialBackoff: time.Minute, MaxBackoff: time.Second})
	if err == nil || !strings.Contains(err.Error(), "MaxBackoff") {
		t.Errorf("bad backoff accepted: %v", err)
	}
	_, err = New(client, f, Config{PercentageOfNodesToScore: 101})
	if err == nil {
		t.Error("PercentageOfNodesToScore 101 accepted")
	}
}

func TestHigherPriorityPodIsPlacedFirst(t *testing.T) {
	objs := []runtime.Object{node("n1", "4", "8Gi", 1)}
	for i := range 10 {
		objs = append(objs, pod(fmt.Sprintf("low-%d", i), "", ""))
	}
	objs = append(objs, pod("urgent", "", "", withPriority(100)))
	h := startScheduler(t, objs...)
	h.waitPod(t, "urgent", func(p *corev1.Pod) bool { return p.Spec.NodeName == "n1" })
}
