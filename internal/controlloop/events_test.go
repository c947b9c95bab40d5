package controlloop

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
)

func TestRecorderWritesEvents(t *testing.T) {
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec, stop := NewRecorder(ctx, client, "tester")
	defer stop()

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"}}
	rec.Eventf(pod, corev1.EventTypeWarning, "FailedScheduling", "0/%d nodes are available", 3)

	var got []corev1.Event
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		got = l.Items
		return len(got) > 0, nil
	})
	if err != nil {
		t.Fatalf("no event written: %v", err)
	}
	e := got[0]
	if e.Type != corev1.EventTypeWarning || e.Reason != "FailedScheduling" || e.Message != "0/3 nodes are available" {
		t.Errorf("event = %s %s %q", e.Type, e.Reason, e.Message)
	}
	if e.InvolvedObject.Kind != "Pod" || e.InvolvedObject.Name != "p" || e.Source.Component != "tester" {
		t.Errorf("event about %+v from %q", e.InvolvedObject, e.Source.Component)
	}
}
