package apiserver

import (
	"container/heap"
	"sync"
)

// revWaiters holds the reads waiting for the watch cache to reach a
// revision (a consistent GET, a list at a resourceVersion), and wakes
// each once the cache has reached its revision, not before.
//
// Before, every such read waited on one channel closed at each event:
// in a fleet's reconnection storm, some 750 reads woke at every one of a
// thousand events a second, each to take the cache's read lock, look
// and sleep again. The event's own writer queued behind them, so the
// cache fell further behind, more reads waited, and Lease renewals timed
// out after 10 s.
type revWaiters struct {
	mu sync.Mutex
	h  revHeap
}

type revWaiter struct {
	rev int64
	ch  chan struct{}
}

// revHeap is a min-heap of waiters by revision.
type revHeap []revWaiter

func (h revHeap) Len() int           { return len(h) }
func (h revHeap) Less(i, j int) bool { return h[i].rev < h[j].rev }
func (h revHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *revHeap) Push(x any)        { *h = append(*h, x.(revWaiter)) }
func (h *revHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = revWaiter{}
	*h = old[:len(old)-1]
	return w
}

// wait returns a channel closed once wake has been called with at least
// rev; reached is the revision already reached, read under the waiters'
// lock, so that a wake cannot slip between the check and the filing.
func (ws *revWaiters) wait(rev int64, reached func() int64) <-chan struct{} {
	ch := make(chan struct{})
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if reached() >= rev {
		close(ch)
		return ch
	}
	heap.Push(&ws.h, revWaiter{rev: rev, ch: ch})
	return ch
}

// wake wakes the waiters of revisions up to rev. A waiter that gave up
// (its request ended) is woken all the same, and forgotten.
func (ws *revWaiters) wake(rev int64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for len(ws.h) > 0 && ws.h[0].rev <= rev {
		close(heap.Pop(&ws.h).(revWaiter).ch)
	}
}
