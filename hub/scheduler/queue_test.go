package scheduler

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

func TestActiveQueueOrdersByPriorityThenArrival(t *testing.T) {
	prio := map[string]int32{"low-1": -5, "mid-1": 0, "high": 1000, "mid-2": 0, "low-2": -5}
	q := newActiveQueue(func(k string) int32 { return prio[k] },
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](0, 0))
	for _, k := range []string{"low-1", "mid-1", "high", "mid-2", "low-2", "mid-1"} {
		q.Add(k)
	}
	var got []string
	for q.Len() > 0 {
		k, _ := q.Get()
		got = append(got, k)
		q.Done(k)
	}
	if want := "[high mid-1 mid-2 low-1 low-2]"; fmt.Sprint(got) != want {
		t.Fatalf("order %v, want %s", got, want)
	}
}

func TestActiveQueueHoldsAKeyBeingPlaced(t *testing.T) {
	q := newActiveQueue(func(string) int32 { return 0 },
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](0, 0))
	q.Add("a")
	k, _ := q.Get()
	q.Add("a")
	if q.Len() != 0 {
		t.Fatal("a key being placed was handed out again before Done")
	}
	q.Done(k)
	if q.Len() != 1 {
		t.Fatal("a key added while being placed was not queued at Done")
	}
	q.ShutDown()
	if k, quit := q.Get(); quit || k != "a" {
		t.Fatalf("Get after ShutDown = %q, %v; want the key still queued", k, quit)
	}
	q.Done("a")
	if _, quit := q.Get(); !quit {
		t.Fatal("Get on a drained queue after ShutDown did not quit")
	}
}

func TestActiveQueueRetriesAfterBackoffInPriorityOrder(t *testing.T) {
	prio := map[string]int32{"low": 0, "high": 10}
	q := newActiveQueue(func(k string) int32 { return prio[k] },
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](20*time.Millisecond, time.Second))
	defer q.ShutDown()
	q.AddRateLimited("low")
	q.AddRateLimited("high")
	if q.Len() != 0 {
		t.Fatal("a retry was queued before its backoff")
	}
	deadline := time.Now().Add(5 * time.Second)
	for q.Len() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if k, _ := q.Get(); k != "high" {
		t.Fatalf("first retry handed out %q, want high", k)
	}
	if q.NumRequeues("high") != 1 {
		t.Fatalf("NumRequeues(high) = %d, want 1", q.NumRequeues("high"))
	}
	q.Forget("high")
	if q.NumRequeues("high") != 0 {
		t.Fatal("Forget did not reset the backoff")
	}
}
