package apiserver

import (
	"testing"
	"time"
)

func TestFailureBuckets(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newLimiters(Limits{FailureRate: 2, FailureBurst: 3}, func() time.Time { return now }).failures
	for i := range 3 {
		if _, ok := b.take("ip:1", 1); !ok {
			t.Fatalf("request %d within the burst refused", i)
		}
	}
	wait, ok := b.take("ip:1", 1)
	if ok || wait <= 0 || wait > time.Second {
		t.Fatalf("past the burst: ok=%v wait=%v, want a refusal with a wait under 1s", ok, wait)
	}
	if _, ok := b.take("ip:2", 1); !ok {
		t.Error("another client was limited by the first one's failures")
	}
	// A check (cost 0) of an empty bucket refuses; of an unknown one passes.
	if _, ok := b.take("ip:1", 0); ok {
		t.Error("an empty bucket passed a check")
	}
	if _, ok := b.take("user:new", 0); !ok {
		t.Error("a client with no failures was refused")
	}
	now = now.Add(time.Second) // two tokens back
	for i := range 2 {
		if _, ok := b.take("ip:1", 1); !ok {
			t.Fatalf("refilled token %d refused", i)
		}
	}
	if _, ok := b.take("ip:1", 1); ok {
		t.Error("more tokens than the refill rate gives")
	}
}

func TestSemaphore(t *testing.T) {
	s := &semaphore{limit: 2}
	if !s.acquire() || !s.acquire() {
		t.Fatal("within the cap refused")
	}
	if s.acquire() {
		t.Fatal("past the cap accepted")
	}
	s.release()
	if !s.acquire() {
		t.Fatal("a released slot was not reusable")
	}
	u := &semaphore{limit: -1}
	for range 10 {
		if !u.acquire() {
			t.Fatal("an unlimited semaphore refused")
		}
	}
}
