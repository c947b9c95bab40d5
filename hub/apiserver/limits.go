package apiserver

import (
	"sync"
	"sync/atomic"
	"time"
)

// limiters holds the state behind Limits.
type limiters struct {
	mutating *semaphore
	readOnly *semaphore
	failures *buckets
}

func newLimiters(l Limits, now func() time.Time) *limiters {
	if l.MaxMutatingInFlight == 0 {
		l.MaxMutatingInFlight = 400
	}
	if l.MaxReadOnlyInFlight == 0 {
		l.MaxReadOnlyInFlight = 800
	}
	if l.FailureRate == 0 {
		l.FailureRate = 10
	}
	if l.FailureBurst == 0 {
		l.FailureBurst = 40
	}
	return &limiters{
		mutating: &semaphore{limit: int64(l.MaxMutatingInFlight)},
		readOnly: &semaphore{limit: int64(l.MaxReadOnlyInFlight)},
		failures: &buckets{rate: l.FailureRate, burst: float64(l.FailureBurst), now: now, m: map[string]*bucket{}},
	}
}

// semaphore counts requests in flight; it never blocks, a full one refuses.
type semaphore struct {
	limit int64 // negative: unlimited
	n     atomic.Int64
}

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

func (s *semaphore) release() {
	if s.limit >= 0 {
		s.n.Add(-1)
	}
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
