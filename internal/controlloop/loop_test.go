package controlloop

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
)

// TestRunRetriesAndDeduplicates checks that a failing key comes back, that
// a succeeding key is reconciled once although added many times before
// the workers start, and that Run returns after ctx ends.
func TestRunRetriesAndDeduplicates(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	done := make(chan struct{})
	c := New("test", func(ctx context.Context, key string) error {
		mu.Lock()
		defer mu.Unlock()
		calls[key]++
		if key == "flaky" && calls[key] < 3 {
			return errors.New("not yet")
		}
		if key == "flaky" {
			close(done)
		}
		return nil
	}, Options{RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 10*time.Millisecond)})

	for range 5 {
		c.EnqueueKey("once")
	}
	c.Enqueue(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}})
	c.EnqueueKey("flaky")

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx, 2) }()
	<-done
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls["once"] != 1 {
		t.Errorf("key added 5 times before start reconciled %d times, want 1", calls["once"])
	}
	if calls["ns/p"] != 1 {
		t.Errorf("ns/p reconciled %d times, want 1", calls["ns/p"])
	}
	if calls["flaky"] != 3 {
		t.Errorf("flaky reconciled %d times, want 3", calls["flaky"])
	}
	if n := c.Queue().NumRequeues("flaky"); n != 0 {
		t.Errorf("flaky's backoff not forgotten after success: %d requeues", n)
	}
}

func TestRunWaitsForCaches(t *testing.T) {
	var synced sync.Mutex
	ready := false
	c := New("waits", func(ctx context.Context, key string) error {
		synced.Lock()
		defer synced.Unlock()
		if !ready {
			t.Error("reconcile ran before the cache synced")
		}
		return nil
	}, Options{})
	c.WaitFor(func() bool { synced.Lock(); defer synced.Unlock(); return ready })
	c.EnqueueKey("k")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx, 1) }()
	time.Sleep(150 * time.Millisecond)
	synced.Lock()
	ready = true
	synced.Unlock()
	for c.Queue().Len() > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestRunRejectsZeroWorkers(t *testing.T) {
	c := New("zero", func(context.Context, string) error { return nil }, Options{})
	if err := c.Run(context.Background(), 0); err == nil {
		t.Fatal("Run with 0 workers succeeded, want an error")
	}
}
