package kubelet

import (
	"sync"
	"time"
)

// backoff is Kubernetes' restart and image-pull backoff: the first retry
// is immediate, then each one waits twice as long as the previous (from
// Initial up to Max). An entry untouched for Reset is forgotten, which for
// a container means Reset of good running clears its CrashLoopBackOff.
type backoff struct {
	initial, max, reset time.Duration

	mu      sync.Mutex
	entries map[string]*backoffEntry
}

type backoffEntry struct {
	delay time.Duration
	last  time.Time // when the last retry was allowed
}

func newBackoff(initial, max, reset time.Duration) *backoff {
	return &backoff{initial: initial, max: max, reset: reset, entries: map[string]*backoffEntry{}}
}

// wait returns how long the caller must still wait before retrying key,
// counting from since (a container's finish time, or the failed pull's
// time); 0 means retry now.
func (b *backoff) wait(key string, since, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[key]
	if !ok {
		return 0
	}
	if b.reset > 0 && since.Sub(e.last) >= b.reset {
		delete(b.entries, key)
		return 0
	}
	if d := since.Add(e.delay).Sub(now); d > 0 {
		return d
	}
	return 0
}

// next records a retry of key at now and grows its delay.
func (b *backoff) next(key string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[key]
	switch {
	case !ok || (b.reset > 0 && now.Sub(e.last) >= b.reset):
		e = &backoffEntry{delay: b.initial}
		b.entries[key] = e
	default:
		e.delay *= 2
		if e.delay > b.max {
			e.delay = b.max
		}
	}
	e.last = now
}

// delay is key's current delay (0 when it has no entry).
func (b *backoff) delay(key string) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.entries[key]; ok {
		return e.delay
	}
	return 0
}

// forget drops every key with the prefix (a pod's UID).
func (b *backoff) forget(prefix string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.entries {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			delete(b.entries, k)
		}
	}
}

// clear drops key after a success.
func (b *backoff) clear(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.entries, key)
}

// waitSinceLast is wait measured from key's last retry (image pulls back
// off from the last attempt, not from a container's finish).
func (b *backoff) waitSinceLast(key string, now time.Time) time.Duration {
	b.mu.Lock()
	e, ok := b.entries[key]
	var last time.Time
	if ok {
		last = e.last
	}
	b.mu.Unlock()
	if !ok {
		return 0
	}
	return b.wait(key, last, now)
}
