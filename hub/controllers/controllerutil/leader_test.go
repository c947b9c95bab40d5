package controllerutil

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
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

// TestRunCandidateStandsAgain: a leader that cannot renew its lease (the
// API failing its updates past the renew deadline) stops its loop and,
// instead of returning, stands again and runs the loop anew once it can.
func TestRunCandidateStandsAgain(t *testing.T) {
	client := fake.NewClientset()
	var failing atomic.Bool
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			return true, nil, apierrors.NewServiceUnavailable("the hub is starting")
		}
		return false, nil, nil
	})
	var runs, running atomic.Int32
	loop := func(ctx context.Context) error {
		if running.Add(1) > 1 {
			t.Error("two runs at once")
		}
		runs.Add(1)
		<-ctx.Done()
		running.Add(-1)
		return nil
	}
	le := LeaderElection{Enabled: true, LeaseName: "test-loop", Identity: "a",
		LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 50 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunCandidate(ctx, client, le, loop) }()
	waitUntil(t, "the first run", func() bool { return runs.Load() == 1 })
	failing.Store(true)
	waitUntil(t, "the run to stop on the lost lease", func() bool { return running.Load() == 0 })
	select {
	case err := <-done:
		t.Fatalf("RunCandidate returned %v on a lost lease, want it to stand again", err)
	default:
	}
	failing.Store(false)
	waitUntil(t, "a second run", func() bool { return runs.Load() == 2 && running.Load() == 1 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("RunCandidate = %v after ctx ended, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunCandidate did not return after ctx ended")
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
