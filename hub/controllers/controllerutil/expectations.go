package controllerutil

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
// deletions (by object key) that the controller asked the API for and has
// not yet seen in its informer cache. Until they are seen the controller must
// not count again: the cache is behind its own writes.
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

// Expect records that add creations and the deletions of deleteKeys were
// requested for key, replacing any earlier expectation (callers act only
// when Satisfied).
func (e *Expectations) Expect(key string, add int, deleteKeys []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := &expectation{add: add, deleting: make(map[string]struct{}, len(deleteKeys)), at: e.clock.Now()}
	for _, k := range deleteKeys {
		x.deleting[k] = struct{}{}
	}
	e.m[key] = x
}

// ExpectCreations records that n creations were requested for key.
func (e *Expectations) ExpectCreations(key string, n int) { e.Expect(key, n, nil) }

// ExpectDeletions records that the objects named by keys are being deleted
// for key.
func (e *Expectations) ExpectDeletions(key string, keys []string) { e.Expect(key, 0, keys) }

// CreationObserved counts one expected creation as seen (or as failed).
func (e *Expectations) CreationObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.m[key]; ok && x.add > 0 {
		x.add--
	}
}

// DeletionObserved marks the deletion of objKey as seen (or as failed).
// An object is counted once even if both its deletionTimestamp and its
// removal are observed.
func (e *Expectations) DeletionObserved(key, objKey string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.m[key]; ok {
		delete(x.deleting, objKey)
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
