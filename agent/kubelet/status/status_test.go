package status

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"flotilla.dev/flotilla/agent/hubclient/fromclientset"
)

func setup(t *testing.T, pods ...*corev1.Pod) (*fake.Clientset, *Manager, *atomic.Int32) {
	objs := make([]runtime.Object, len(pods))
	for i, p := range pods {
		objs[i] = p
	}
	client := fake.NewClientset(objs...)
	var updates atomic.Int32
	var failures atomic.Int32
	failures.Store(2)
	client.PrependReactor("update", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "status" {
			return false, nil, nil
		}
		if a.(k8stesting.UpdateAction).GetObject().(*corev1.Pod).Name == "flaky" && failures.Add(-1) >= 0 {
			return true, nil, errors.New("hub unreachable")
		}
		updates.Add(1)
		return false, nil, nil
	})
	get := func(uid types.UID) (*corev1.Pod, bool) {
		for _, p := range pods {
			if p.UID == uid {
				cur, err := client.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
				return cur, err == nil
			}
		}
		return nil, false
	}
	m := New(fromclientset.New(client), get, Options{RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return client, m, &updates
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
			{Type: "example.com/Gate", Status: corev1.ConditionTrue},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		}}}
}

func running(ip string) corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(time.Unix(1700000000, 0))},
	}}
}

func TestWritesOnlyChangesAndKeepsOthersConditions(t *testing.T) {
	p := newPod("web")
	client, m, updates := setup(t, p)
	m.Set(p, running("10.42.0.5"))
	eventually(t, "first write", func() bool { return updates.Load() == 1 })
	got, _ := client.CoreV1().Pods("ns").Get(context.Background(), "web", metav1.GetOptions{})
	if got.Status.Phase != corev1.PodRunning || got.Status.PodIP != "10.42.0.5" {
		t.Fatalf("status = %+v", got.Status)
	}
	if len(got.Status.Conditions) != 3 || !hasCondition(got.Status.Conditions, "example.com/Gate") {
		t.Fatalf("conditions = %+v", got.Status.Conditions)
	}

	// The same status again, and a copy with a time in another location:
	// nothing to write.
	m.Set(p, running("10.42.0.5"))
	again := running("10.42.0.5")
	again.Conditions[1].LastTransitionTime = metav1.NewTime(time.Unix(1700000000, 0).In(time.FixedZone("X", 3600)))
	m.Set(p, again)
	m.queue.Add(p.UID) // even a forced look finds nothing to do
	time.Sleep(100 * time.Millisecond)
	if n := updates.Load(); n != 1 {
		t.Fatalf("%d writes for an unchanged status", n)
	}
	m.Set(p, running("10.42.0.6"))
	// The fake's reactor counts the write before UpdateStatus returns to
	// the Manager, so Writes() catches up a moment later.
	eventually(t, "second write", func() bool { return updates.Load() == 2 && m.Writes() == 2 })
	if st, ok := m.Get(p.UID); !ok || st.PodIP != "10.42.0.6" {
		t.Fatalf("Get = %+v %v", st, ok)
	}
}

func TestRetriesAndTerminalPhase(t *testing.T) {
	flaky := newPod("flaky")
	done := newPod("done")
	done.Status.Phase = corev1.PodSucceeded
	client, m, updates := setup(t, flaky, done)
	m.Set(flaky, running("10.42.0.7"))
	eventually(t, "write after retries", func() bool { return updates.Load() == 1 })

	m.Set(done, running("10.42.0.8"))
	eventually(t, "terminal pod written", func() bool { return updates.Load() == 2 })
	got, _ := client.CoreV1().Pods("ns").Get(context.Background(), "done", metav1.GetOptions{})
	if got.Status.Phase != corev1.PodSucceeded || got.Status.PodIP != "10.42.0.8" {
		t.Fatalf("terminal phase moved back: %+v", got.Status)
	}

	// A pod the hub does not have is not written and not retried.
	ghost := newPod("ghost")
	m.Set(ghost, running("10.42.0.9"))
	time.Sleep(50 * time.Millisecond)
	if m.queue.Len() != 0 || updates.Load() != 2 {
		t.Fatal("status of a pod missing on the hub was written or requeued")
	}
	m.Forget(ghost.UID)
	if _, ok := m.Get(ghost.UID); ok {
		t.Fatal("Forget kept the pod")
	}
}

func TestMerge(t *testing.T) {
	cur := corev1.PodStatus{Phase: corev1.PodFailed, Conditions: []corev1.PodCondition{{Type: "DisruptionTarget", Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	want := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}
	got := Merge(cur, want)
	if got.Phase != corev1.PodFailed || len(got.Conditions) != 2 || got.Conditions[0].Status != corev1.ConditionFalse || got.Conditions[1].Type != "DisruptionTarget" {
		t.Fatalf("merge = %+v", got)
	}
}

// TestRewritesWhenTheHubSaysOtherwise is a device back from a partition:
// the hub marked its pod not ready meanwhile, the device's status did
// not change, and the device's word must win again.
func TestRewritesWhenTheHubSaysOtherwise(t *testing.T) {
	p := newPod("web")
	client, m, updates := setup(t, p)
	m.Set(p, running("10.42.0.5"))
	eventually(t, "first write", func() bool { return updates.Load() == 1 })

	hub, _ := client.CoreV1().Pods("ns").Get(context.Background(), "web", metav1.GetOptions{})
	for i := range hub.Status.Conditions {
		if hub.Status.Conditions[i].Type == corev1.PodReady {
			hub.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	if _, err := client.CoreV1().Pods("ns").UpdateStatus(context.Background(), hub, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.Set(p, running("10.42.0.5")) // the device's view is unchanged
	eventually(t, "the device's status written again", func() bool {
		got, _ := client.CoreV1().Pods("ns").Get(context.Background(), "web", metav1.GetOptions{})
		for _, c := range got.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	})
}
