package controllerutil

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

func TestRunElectedDisabledRunsDirectly(t *testing.T) {
	want := errors.New("boom")
	err := RunElected(context.Background(), fake.NewClientset(), LeaderElection{}, func(context.Context) error { return want })
	if !errors.Is(err, want) {
		t.Fatalf("RunElected = %v, want %v", err, want)
	}
}

func TestRunElectedNeedsLeaseName(t *testing.T) {
	err := RunElected(context.Background(), fake.NewClientset(), LeaderElection{Enabled: true}, func(context.Context) error { return nil })
	if err == nil {
		t.Fatal("RunElected without a lease name succeeded, want an error")
	}
}

// TestRunElectedOneLeader runs two candidates on one Lease: exactly one
// runs the loop; when it stops, the other takes over, never overlapping.
func TestRunElectedOneLeader(t *testing.T) {
	client := fake.NewClientset()
	var running, maxRunning, ran atomic.Int32
	loop := func(ctx context.Context) error {
		n := running.Add(1)
		for {
			m := maxRunning.Load()
			if n <= m || maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		ran.Add(1)
		<-ctx.Done()
		running.Add(-1)
		return nil
	}
	cfg := func(id string) LeaderElection {
		return LeaderElection{Enabled: true, LeaseName: "test-loop", Identity: id,
			LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 50 * time.Millisecond}
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); errs[0] = RunElected(ctxA, client, cfg("a"), loop) }()
	for ran.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	go func() { defer wg.Done(); errs[1] = RunElected(ctxB, client, cfg("b"), loop) }()
	time.Sleep(300 * time.Millisecond)
	if ran.Load() != 1 {
		t.Fatalf("second candidate ran while the first held the lease")
	}
	cancelA()
	for ran.Load() < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	cancelB()
	wg.Wait()
	if maxRunning.Load() != 1 {
		t.Errorf("%d loops ran at once, want 1", maxRunning.Load())
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("candidate %d: %v", i, err)
		}
	}
}
