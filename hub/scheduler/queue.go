package scheduler

import (
	"container/heap"

	"k8s.io/client-go/util/workqueue"
)

// newActiveQueue is the queue of keys of pods waiting for a placement:
// client-go's rate-limited workqueue (one copy per key, a key being
// placed held until Done and queued again then if added meanwhile,
// per-key backoff) over a heap that hands out the highest priority
// first and, among equals, the key queued first (kube-scheduler's
// PrioritySort).
func newActiveQueue(priority func(key string) int32, limiter workqueue.TypedRateLimiter[string]) workqueue.TypedRateLimitingInterface[string] {
	base := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{
		Queue: newPriorityHeap(priority),
	})
	return workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[string]{
		DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{
			Queue: base,
		}),
	})
}

// priorityHeap is a workqueue.Queue ordered by priority, then arrival.
// workqueue calls it under its own lock, so it takes none; it never sees
// a key twice, as workqueue pushes a key only when it is not queued.
type priorityHeap struct {
	priority func(key string) int32
	items    queueHeap
	seq      uint64
}

var _ workqueue.Queue[string] = (*priorityHeap)(nil)

func newPriorityHeap(priority func(string) int32) *priorityHeap {
	return &priorityHeap{priority: priority}
}

// Touch keeps the key where it is: a pod's priority is fixed at creation,
// and a key added again keeps its place among its equals.
func (h *priorityHeap) Touch(string) {}

func (h *priorityHeap) Push(key string) {
	h.seq++
	heap.Push(&h.items, queueItem{key: key, priority: h.priority(key), seq: h.seq})
}

func (h *priorityHeap) Len() int { return len(h.items) }

func (h *priorityHeap) Pop() string { return heap.Pop(&h.items).(queueItem).key }

type queueItem struct {
	key      string
	priority int32
	seq      uint64
}

type queueHeap []queueItem

func (h queueHeap) Len() int { return len(h) }
func (h queueHeap) Less(i, j int) bool {
	if h[i].priority != h[j].priority {
		return h[i].priority > h[j].priority
	}
	return h[i].seq < h[j].seq
}
func (h queueHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *queueHeap) Push(x any)   { *h = append(*h, x.(queueItem)) }
func (h *queueHeap) Pop() any {
	old := *h
	n := len(old)
	it := old[n-1]
	*h = old[:n-1]
	return it
}
