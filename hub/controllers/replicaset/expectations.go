package replicaset

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// ExpectationsTimeout is how long an unfulfilled expectation blocks a
// controller: past it the controller acts on what its cache shows, so a lost
// watch event delays a sync by minutes rather than forever (Kubernetes' value).
const ExpectationsTimeout = 5 * time.Minute

// Expectations remembers, per controller key, the creations and the
// deletions (by pod key) that the controller asked the API for and has not
// yet seen in its informer cache. Until they are seen the controller must not
// count pods again: the cache is behind its own writes.
type Expectations struct {
	clock clock.PassiveClock

	mu sync.Mutex
	m  map[string]*expectation
}

type expectation struct {
	add      int
	deleting map[string]struct{}
	at       time.Time
}

// NewExpectations returns empty expectations timed by c.
func NewExpectations(c clock.PassiveClock) *Expectations {
	if c == nil {
		c = clock.RealClock{}
	}
	return &Expectations{clock: c, m: map[string]*expectation{}}
}

// Satisfied reports whether the controller may trust its cache for key:
// nothing is expected, everything expected was seen, or the expectation is
// older than ExpectationsTimeout.
func (e *Expectations) Satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.m[key]
	if !ok {
		return true
	}
	if x.add <= 0 && len(x.deleting) == 0 {
		return true
	}
	return e.clock.Since(x.at) > ExpectationsTimeout
}

// ExpectCreations records that n creations were requested for key,
// replacing any earlier expectation (callers act only when Satisfied).
func (e *Expectations) ExpectCreations(key string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.m[key] = &expectation{add: n, deleting: map[string]struct{}{}, at: e.clock.Now()}
}

// ExpectDeletions records that the pods named by podKeys are being deleted
// for key, replacing any earlier expectation.
func (e *Expectations) ExpectDeletions(key string, podKeys []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := &expectation{deleting: make(map[string]struct{}, len(podKeys)), at: e.clock.Now()}
	for _, k := range podKeys {
		x.deleting[k] = struct{}{}
	}
	e.m[key] = x
}

// CreationObserved counts one expected creation as seen (or as failed).
func (e *Expectations) CreationObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.m[key]; ok && x.add > 0 {
		x.add--
	}
}

// DeletionObserved marks the deletion of podKey as seen (or as failed). A
// pod is counted once even if both its deletionTimestamp and its removal are
// observed.
func (e *Expectations) DeletionObserved(key, podKey string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.m[key]; ok {
		delete(x.deleting, podKey)
	}
}

// Pending returns the creations and deletions still expected for key.
func (e *Expectations) Pending(key string) (add, del int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.m[key]; ok {
		return x.add, len(x.deleting)
	}
	return 0, 0
}

// Delete forgets key, for a controller object that is gone.
func (e *Expectations) Delete(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}
