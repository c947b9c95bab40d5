package apiserver_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/hub/hubtest"
)

// TestEventsExpire: the Events about one object keep to their share, the
// newest kept, and Events go once the TTL has passed since they were last
// written (kube-apiserver's lease starts at the write too).
func TestEventsExpire(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{EventTTL: 3 * time.Second, MaxEventBytesPerObject: 4000})
	ctx := context.Background()
	events := h.Client.CoreV1().Events("default")
	mk := func(name, about string, last time.Time) {
		t.Helper()
		_, err := events.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: about},
			Reason:         "Test", Message: strings.Repeat("m", 500), Type: corev1.EventTypeNormal,
			FirstTimestamp: metav1.NewTime(last), LastTimestamp: metav1.NewTime(last)}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	mk("other", "a", now)
	// Twelve Events of about 800 bytes about b: only the newest fit in 4000.
	for i := range 12 {
		mk(fmt.Sprintf("b-%02d", i), "b", now.Add(time.Duration(i)*time.Millisecond))
	}
	list := func() []string {
		l, err := events.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range l.Items {
			out = append(out, e.Name)
		}
		slices.Sort(out)
		return out
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := list()
		// About 800 bytes each: at most five fit in 4000 (deletions go
		// oldest first, so what is left is always the newest).
		if slices.Contains(got, "other") && len(got) <= 6 {
			for _, n := range got {
				if n < "b-07" && n != "other" {
					t.Errorf("kept %s but dropped a newer Event (left: %v)", n, got)
				}
			}
			if !slices.Contains(got, "b-11") {
				t.Errorf("the newest Event was dropped (left: %v)", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s the Events are %v: b's were not cut to their share", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Past the TTL, they all go.
	deadline = time.Now().Add(10 * time.Second)
	for len(list()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Events left 10s after a 3s TTL: %v", list())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
