package apiserver

import (
	"sync/atomic"
	"testing"
	"time"
)

// Each read waiting for a revision wakes once the cache reaches it, and
// not at the events before.
func TestRevWaitersWakeOnlyAtTheirRevision(t *testing.T) {
	var ws revWaiters
	var reached atomic.Int64
	reached.Store(10)
	if ch := ws.wait(10, reached.Load); !closed(ch) {
		t.Fatal("a wait for a revision already reached did not return at once")
	}
	type waiter struct {
		rev int64
		ch  <-chan struct{}
	}
	var chans []waiter
	for _, rev := range []int64{15, 12, 20, 12, 30} {
		chans = append(chans, waiter{rev, ws.wait(rev, reached.Load)})
	}
	publish := func(rev int64) {
		reached.Store(rev)
		ws.wake(rev)
	}
	publish(11)
	for _, w := range chans {
		if closed(w.ch) {
			t.Errorf("the wait for %d woke at 11", w.rev)
		}
	}
	publish(15)
	for _, w := range chans {
		if closed(w.ch) != (w.rev <= 15) {
			t.Errorf("at 15, the wait for %d: woken %v", w.rev, closed(w.ch))
		}
	}
	publish(40)
	for _, w := range chans {
		if !closed(w.ch) {
			t.Errorf("at 40, the wait for %d still waits", w.rev)
		}
	}
	if len(ws.h) != 0 {
		t.Errorf("%d waiters left after every revision was reached", len(ws.h))
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(10 * time.Millisecond):
		return false
	}
}
