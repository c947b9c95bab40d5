package apiserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// A rollout's writes fill the mutating requests in flight; a device's
// Lease renewal and its Node's status still pass, from a pool of their
// own. A refused request is told to come back in 1 to 3 s, drawn for
// each answer.
func TestHeartbeatsHaveSlotsOfTheirOwn(t *testing.T) {
	s := &Server{limits: newLimiters(Limits{MaxMutatingInFlight: 1, MaxHeartbeatsInFlight: 1, QueueWait: -1}, time.Now)}
	node := &UserInfo{Name: "system:node:dev-1", Groups: []string{GroupNodes}}
	take := func(user *UserInfo, path string) (*requestRecord, *httptest.ResponseRecorder) {
		t.Helper()
		r := httptest.NewRequest(http.MethodPut, path, nil)
		ri, isResource, err := parseRequest(r)
		if err != nil || !isResource {
			t.Fatalf("%s: %v", path, err)
		}
		rr, w := &requestRecord{user: user}, httptest.NewRecorder()
		if !s.takeSlot(w, r, rr, &ri, isResource) {
			return nil, w
		}
		return rr, w
	}
	refused := func(user *UserInfo, path string) {
		t.Helper()
		rr, w := take(user, path)
		if rr != nil {
			rr.slot.release()
			t.Fatalf("%s by %s took a slot; want 429", path, user.Name)
		}
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("%s by %s: %d, want 429", path, user.Name, w.Code)
		}
	}
	const (
		podStatus  = "/api/v1/namespaces/default/pods/p/status"
		lease      = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/dev-1"
		nodeStatus = "/api/v1/nodes/dev-1/status"
	)

	rollout, _ := take(node, podStatus)
	if rollout == nil {
		t.Fatal("the first pod status write was refused")
	}
	refused(node, podStatus)

	renewal, _ := take(node, lease)
	if renewal == nil {
		t.Fatal("a device's Lease renewal was refused while pod status writes fill the mutating pool")
	}
	refused(node, nodeStatus) // the heartbeats' pool (of one here) is full
	renewal.slot.release()
	ready, _ := take(node, nodeStatus)
	if ready == nil {
		t.Fatal("a device's Node status was refused while pod status writes fill the mutating pool")
	}
	ready.slot.release()

	// A Lease elsewhere, or a node Lease written by anyone but a device,
	// is an ordinary write.
	refused(node, "/apis/coordination.k8s.io/v1/namespaces/default/leases/dev-1")
	refused(&UserInfo{Name: "ops"}, lease)

	seen := map[int]bool{}
	for range 200 {
		_, w := take(node, podStatus)
		n, err := strconv.Atoi(w.Header().Get("Retry-After"))
		if err != nil || n < 1 || n > 3 {
			t.Fatalf("Retry-After %q, want 1 to 3", w.Header().Get("Retry-After"))
		}
		seen[n] = true
	}
	if len(seen) != 3 {
		t.Errorf("200 refusals were told %v only, want 1, 2 and 3 s", seen)
	}
	rollout.slot.release()
	if again, _ := take(node, podStatus); again == nil {
		t.Error("the mutating slot was not given back")
	}
}

// TestFullPoolsQueue: a request that finds its pool full waits for a slot
// (QueueWait), in order, as many at most as the pool holds; one that
// waits in vain, or whose client gives up, is refused.
func TestFullPoolsQueue(t *testing.T) {
	const wait = time.Second
	sem := newLimiters(Limits{MaxHeartbeatsInFlight: 2, QueueWait: wait}, time.Now).heartbeats
	bg := context.Background()
	for range 2 {
		if !sem.acquireWait(bg) {
			t.Fatal("a free slot was refused")
		}
	}
	got := make(chan int, 3)
	for i := range 2 {
		go func() {
			if sem.acquireWait(bg) {
				got <- i
			} else {
				got <- -1
			}
		}()
		// In this order: the next starts once this one waits.
		for deadline := time.Now().Add(10 * time.Second); waiting(sem) < i+1; {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d never queued", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	start := time.Now()
	if sem.acquireWait(bg) {
		t.Fatal("a third waiter was let in, with two slots taken and two waiting")
	}
	if took := time.Since(start); took > wait/2 {
		t.Errorf("with the queue full, a request was refused after %v, not at once", took)
	}
	sem.release()
	if first := <-got; first != 0 {
		t.Errorf("the slot went to waiter %d, want the first", first)
	}
	sem.release()
	if second := <-got; second != 1 {
		t.Errorf("the next slot went to waiter %d, want the second", second)
	}

	// Full again (the two waiters hold the slots): a wait in vain ends
	// after QueueWait, one whose client leaves ends then.
	start = time.Now()
	if sem.acquireWait(bg) {
		t.Fatal("a full pool let a request in")
	}
	if took := time.Since(start); took < wait || took > 5*wait {
		t.Errorf("a wait in vain took %v, want %v", took, wait)
	}
	ctx, cancel := context.WithCancel(bg)
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	start = time.Now()
	if sem.acquireWait(ctx) {
		t.Fatal("a request whose client left took a slot")
	}
	if took := time.Since(start); took > wait/2 {
		t.Errorf("a request whose client left waited %v", took)
	}
	sem.release()
	sem.release()
	if sem.n.Load() != 0 || len(sem.waiters) != 0 {
		t.Errorf("after every release: %d slots taken, %d waiting; want none", sem.n.Load(), len(sem.waiters))
	}
}

func waiting(s *semaphore) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters)
}
