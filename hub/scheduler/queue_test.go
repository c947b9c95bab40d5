package scheduler

import (
	"fmt"
	"testing"

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
	if _, quit := q.Get(); !quit {
		t.Fatal("Get after ShutDown did not quit")
	}
}
