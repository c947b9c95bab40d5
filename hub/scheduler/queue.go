package scheduler

import (
	"container/heap"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// activeQueue holds the keys of pods waiting for a placement, highest
// priority first and, among equals, the one queued first (kube-scheduler's
// PrioritySort). It keeps workqueue's contract, which the loop relies
// on: a key is queued at most once, a key being placed is not handed out
// again until Done, and one added meanwhile is queued at Done. Retries
// wait out the rate limiter's per-key backoff before they are queued.
type activeQueue struct {
	priority func(key string) int32
	limiter  workqueue.TypedRateLimiter[string]

	mu         sync.Mutex
	cond       *sync.Cond
	items      queueHeap
	queued     map[string]*queueItem
	processing map[string]bool
	dirty      map[string]bool
	seq        uint64
	shutdown   bool
}

type queueItem struct {
	key      string
	priority int32
	seq      uint64
	index    int
}

func newActiveQueue(priority func(string) int32, limiter workqueue.TypedRateLimiter[string]) *activeQueue {
	q := &activeQueue{
		priority:   priority,
		limiter:    limiter,
		queued:     map[string]*queueItem{},
		processing: map[string]bool{},
		dirty:      map[string]bool{},
	}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Add queues key unless it is queued already; a key being placed is
// queued again when its attempt is Done.
func (q *activeQueue) Add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	if q.processing[key] {
		q.dirty[key] = true
		return
	}
	q.pushLocked(key)
}

func (q *activeQueue) pushLocked(key string) {
	if _, ok := q.queued[key]; ok {
		return
	}
	q.seq++
	it := &queueItem{key: key, priority: q.priority(key), seq: q.seq}
	q.queued[key] = it
	heap.Push(&q.items, it)
	q.cond.Signal()
}

// AddRateLimited queues key after its backoff.
func (q *activeQueue) AddRateLimited(key string) {
	d := q.limiter.When(key)
	if d <= 0 {
		q.Add(key)
		return
	}
	time.AfterFunc(d, func() { q.Add(key) })
}

// Forget resets key's backoff.
func (q *activeQueue) Forget(key string) { q.limiter.Forget(key) }

// Get blocks until a key is queued and hands out the first; quit is true
// once the queue is shut down.
func (q *activeQueue) Get() (key string, quit bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.shutdown {
		q.cond.Wait()
	}
	if q.shutdown {
		return "", true
	}
	it := heap.Pop(&q.items).(*queueItem)
	delete(q.queued, it.key)
	q.processing[it.key] = true
	return it.key, false
}

// Done ends the attempt on key.
func (q *activeQueue) Done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	if q.dirty[key] {
		delete(q.dirty, key)
		if !q.shutdown {
			q.pushLocked(key)
		}
	}
}

// Len is the number of queued keys.
func (q *activeQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// ShutDown makes Get return quit.
func (q *activeQueue) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shutdown = true
	q.cond.Broadcast()
}

type queueHeap []*queueItem

func (h queueHeap) Len() int { return len(h) }
func (h queueHeap) Less(i, j int) bool {
	if h[i].priority != h[j].priority {
		return h[i].priority > h[j].priority
	}
	return h[i].seq < h[j].seq
}
func (h queueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *queueHeap) Push(x any) {
	it := x.(*queueItem)
	it.index = len(*h)
	*h = append(*h, it)
}
func (h *queueHeap) Pop() any {
	old := *h
	n := len(old)
	it := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return it
}
