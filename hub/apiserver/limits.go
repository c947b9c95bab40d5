package apiserver

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// limiters holds the state behind Limits.
type limiters struct {
	mutating *semaphore
	readOnly *semaphore
	// heartbeats are devices' writes of their Leases and Nodes.
	heartbeats *semaphore
	public     *semaphore
	// rvWaits counts lists waiting for a resourceVersion the cache has
	// not reached.
	rvWaits  *semaphore
	bodies   *byteBudget
	failures *buckets
	requests *buckets // by user

	bodyTimeout, publicBodyTimeout time.Duration
	responseTimeout                time.Duration
	minWatchTimeout                time.Duration
	publicMaxBody                  int64
}

// Defaults of Limits.
const (
	DefaultMaxMutatingInFlight     = 400
	DefaultMaxReadOnlyInFlight     = 800
	DefaultMaxHeartbeatsInFlight   = 400
	DefaultMaxPublicInFlight       = 64
	DefaultQueueWait               = 2 * time.Second
	DefaultMaxPublicBodyBytes      = 1 << 20
	DefaultMaxBodyBytesInFlight    = 256 << 20
	DefaultBodyTimeout             = 60 * time.Second
	DefaultPublicBodyTimeout       = 10 * time.Second
	DefaultResponseTimeout         = 2 * time.Minute
	DefaultMinWatchTimeout         = 30 * time.Minute
	DefaultMaxResourceVersionWaits = 100
	DefaultUserRate                = 50
	DefaultUserBurst               = 200
)

// resourceVersionWait is how long a list waits for a resourceVersion the
// hub has not reached yet before it answers 504 "Too large resource
// version", as kube-apiserver's watch cache does (blockTimeout, 3 s).
var resourceVersionWait = 3 * time.Second

func newLimiters(l Limits, now func() time.Time) *limiters {
	if l.MaxMutatingInFlight == 0 {
		l.MaxMutatingInFlight = DefaultMaxMutatingInFlight
	}
	if l.MaxReadOnlyInFlight == 0 {
		l.MaxReadOnlyInFlight = DefaultMaxReadOnlyInFlight
	}
	if l.MaxHeartbeatsInFlight == 0 {
		l.MaxHeartbeatsInFlight = DefaultMaxHeartbeatsInFlight
	}
	if l.MaxPublicInFlight == 0 {
		l.MaxPublicInFlight = DefaultMaxPublicInFlight
	}
	if l.QueueWait == 0 {
		l.QueueWait = DefaultQueueWait
	}
	// As many may wait as the pool holds.
	queued := func(limit int) *semaphore {
		return &semaphore{limit: int64(limit), wait: l.QueueWait, queue: limit}
	}
	if l.MaxPublicBodyBytes <= 0 {
		l.MaxPublicBodyBytes = DefaultMaxPublicBodyBytes
	}
	if l.MaxBodyBytesInFlight == 0 {
		l.MaxBodyBytesInFlight = DefaultMaxBodyBytesInFlight
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = DefaultBodyTimeout
	}
	if l.PublicBodyTimeout <= 0 {
		l.PublicBodyTimeout = DefaultPublicBodyTimeout
	}
	if l.ResponseTimeout <= 0 {
		l.ResponseTimeout = DefaultResponseTimeout
	}
	if l.MinWatchTimeout <= 0 {
		l.MinWatchTimeout = DefaultMinWatchTimeout
	}
	if l.MaxResourceVersionWaits == 0 {
		l.MaxResourceVersionWaits = DefaultMaxResourceVersionWaits
	}
	if l.FailureRate == 0 {
		l.FailureRate = 10
	}
	if l.FailureBurst == 0 {
		l.FailureBurst = 40
	}
	if l.UserRate == 0 {
		l.UserRate = DefaultUserRate
	}
	if l.UserBurst == 0 {
		l.UserBurst = DefaultUserBurst
	}
	return &limiters{
		mutating:          queued(l.MaxMutatingInFlight),
		readOnly:          queued(l.MaxReadOnlyInFlight),
		heartbeats:        queued(l.MaxHeartbeatsInFlight),
		public:            &semaphore{limit: int64(l.MaxPublicInFlight)},
		rvWaits:           &semaphore{limit: int64(l.MaxResourceVersionWaits)},
		bodies:            &byteBudget{limit: l.MaxBodyBytesInFlight},
		failures:          &buckets{rate: l.FailureRate, burst: float64(l.FailureBurst), now: now, m: map[string]*bucket{}},
		requests:          &buckets{rate: l.UserRate, burst: float64(l.UserBurst), now: now, m: map[string]*bucket{}},
		bodyTimeout:       l.BodyTimeout,
		publicBodyTimeout: l.PublicBodyTimeout,
		responseTimeout:   l.ResponseTimeout,
		minWatchTimeout:   l.MinWatchTimeout,
		publicMaxBody:     int64(l.MaxPublicBodyBytes),
	}
}

// waitForResourceVersion waits until the cache has seen revision rev, at
// most resourceVersionWait, and then answers as kube-apiserver does: 504
// "Too large resource version" with a ResourceVersionTooLarge cause, which
// client-go's reflectors answer with a list from the latest state. While
// it waits the request gives up its slot in flight (it costs the hub
// nothing), and at most MaxResourceVersionWaits requests wait at once.
func (s *Server) waitForResourceVersion(ctx context.Context, rev int64) error {
	if s.cache.revision() >= rev {
		return s.cache.waitFor(ctx, rev) // (only waits for a cache still loading)
	}
	if !s.limits.rvWaits.acquire() {
		return apierrors.NewTooManyRequests(fmt.Sprintf("too many requests are waiting for a resourceVersion this hub has not reached yet (this one asks for %d, the hub is at %d); retry later, or read without a resourceVersion", rev, s.cache.revision()), 1)
	}
	defer s.limits.rvWaits.release()
	var sl *slot
	if rr := recordFrom(ctx); rr != nil {
		sl = rr.slot
	}
	sl.release()
	wctx, cancel := context.WithTimeout(ctx, resourceVersionWait)
	defer cancel()
	if err := s.cache.waitFor(wctx, rev); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return tooLargeResourceVersion(rev, s.cache.revision())
	}
	if !sl.reacquire() {
		return apierrors.NewTooManyRequests("the hub has too many requests in flight; retry later", 1)
	}
	return nil
}

func tooLargeResourceVersion(rev, cur int64) error {
	err := apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d (the hub waited %v for it; retry, or read without a resourceVersion for the latest state)", rev, cur, resourceVersionWait), 1)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
	return err
}

// slot is a request's place in a semaphore. A request may give it up
// while it waits for something that takes no work of the hub's (a
// resourceVersion to arrive) and take it again after. Only the request's
// goroutine uses it.
type slot struct {
	sem  *semaphore
	held bool
}

func (s *slot) release() {
	if s != nil && s.held {
		s.sem.release()
		s.held = false
	}
}

// reacquire takes the slot again; false when the semaphore is full.
func (s *slot) reacquire() bool {
	if s == nil || s.held {
		return true
	}
	s.held = s.sem.acquire()
	return s.held
}

// byteBudget counts the bytes of request bodies held in memory at once.
// Bytes are charged as they arrive, so a client that sends slowly holds
// little of it.
type byteBudget struct {
	limit int64 // negative: unlimited
	n     atomic.Int64
}

// charge adds n bytes; false (having charged nothing) past the limit.
func (b *byteBudget) charge(n int64) bool {
	if b.limit < 0 {
		return true
	}
	if b.n.Add(n) > b.limit {
		b.n.Add(-n)
		return false
	}
	return true
}

func (b *byteBudget) refund(n int64) {
	if b.limit >= 0 {
		b.n.Add(-n)
	}
}

// semaphore counts requests in flight. A full one refuses at once, or,
// with wait set, lets up to queue requests wait that long for a slot, in
// the order they came: a store commit that stalls for a second holds up a
// second's writes, and the requests behind them are better answered a
// second late than refused and sent again.
type semaphore struct {
	limit int64 // negative: unlimited
	n     atomic.Int64
	wait  time.Duration
	queue int

	mu      sync.Mutex
	waiters []chan struct{} // closed when handed a slot
}

// acquire takes a slot if one is free.
func (s *semaphore) acquire() bool {
	if s.limit < 0 {
		return true
	}
	if s.n.Add(1) > s.limit {
		s.n.Add(-1)
		return false
	}
	return true
}

// acquireWait takes a slot, waiting for one if the semaphore queues and
// its queue has room, until the wait ends or ctx does.
func (s *semaphore) acquireWait(ctx context.Context) bool {
	if s.acquire() {
		return true
	}
	if s.wait <= 0 {
		return false
	}
	s.mu.Lock()
	// A slot released since the first try was not handed to anyone.
	if s.acquire() {
		s.mu.Unlock()
		return true
	}
	if len(s.waiters) >= s.queue {
		s.mu.Unlock()
		return false
	}
	ready := make(chan struct{})
	s.waiters = append(s.waiters, ready)
	s.mu.Unlock()
	t := time.NewTimer(s.wait)
	defer t.Stop()
	select {
	case <-ready:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.waiters, ready); i >= 0 {
		s.waiters = slices.Delete(s.waiters, i, i+1)
		return false
	}
	// Handed a slot as the wait ended.
	return true
}

// release gives the slot to the longest waiting request, or frees it.
func (s *semaphore) release() {
	if s.limit < 0 {
		return
	}
	if s.wait > 0 {
		s.mu.Lock()
		if len(s.waiters) > 0 {
			next := s.waiters[0]
			s.waiters = slices.Delete(s.waiters, 0, 1)
			s.mu.Unlock()
			close(next)
			return
		}
		s.n.Add(-1)
		s.mu.Unlock()
		return
	}
	s.n.Add(-1)
}

// buckets are token buckets by client key.
type buckets struct {
	rate, burst float64 // rate negative: unlimited
	now         func() time.Time
	mu          sync.Mutex
	m           map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// maxBuckets bounds the memory a flood from many addresses can take; past
// it, buckets that have refilled are forgotten (they hold no state).
const maxBuckets = 65536

// take removes cost tokens from key's bucket. With cost 0 it only checks
// that the bucket is not empty. When it refuses, wait says how long until
// a token is back.
func (b *buckets) take(key string, cost float64) (wait time.Duration, ok bool) {
	if b.rate < 0 {
		return 0, true
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	bk := b.m[key]
	if bk == nil {
		if cost == 0 {
			return 0, true
		}
		if len(b.m) >= maxBuckets {
			b.sweep(now)
		}
		bk = &bucket{tokens: b.burst, last: now}
		b.m[key] = bk
	}
	bk.tokens = min(b.burst, bk.tokens+now.Sub(bk.last).Seconds()*b.rate)
	bk.last = now
	if bk.tokens < 1 {
		return time.Duration((1 - bk.tokens) / b.rate * float64(time.Second)), false
	}
	bk.tokens -= cost
	return 0, true
}

func (b *buckets) sweep(now time.Time) {
	for k, bk := range b.m {
		if bk.tokens+now.Sub(bk.last).Seconds()*b.rate >= b.burst {
			delete(b.m, k)
		}
	}
}
