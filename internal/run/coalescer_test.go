package run

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeSync is the function a Coalescer drives: it records every run and,
// while gate is set, holds each run until the test lets it go.
type fakeSync struct {
	mu       sync.Mutex
	runs     []runRecord
	started  chan int // run numbers, as they start
	gate     chan struct{}
	inFlight atomic.Int32
	maxIn    atomic.Int32
	fail     int // the first fail runs return an error
	hold     time.Duration
}

type runRecord struct {
	at   time.Time
	full bool
}

func newFakeSync() *fakeSync { return &fakeSync{started: make(chan int, 10000)} }

func (f *fakeSync) run(ctx context.Context, full bool) error {
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		m := f.maxIn.Load()
		if n <= m || f.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	f.mu.Lock()
	f.runs = append(f.runs, runRecord{time.Now(), full})
	i := len(f.runs)
	gate, fail := f.gate, i <= f.fail
	f.mu.Unlock()
	select {
	case f.started <- i:
	default: // a test that triggers without end reads none
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	time.Sleep(f.hold)
	if fail {
		return errBoom
	}
	return nil
}

func (f *fakeSync) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.runs)
}

func (f *fakeSync) records() []runRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]runRecord(nil), f.runs...)
}

func (f *fakeSync) waitRun(t *testing.T, want int) {
	t.Helper()
	select {
	case n := <-f.started:
		if n != want {
			t.Fatalf("run %d started, want run %d", n, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("run %d did not start", want)
	}
}

func (f *fakeSync) noRun(t *testing.T, d time.Duration, why string) {
	t.Helper()
	select {
	case n := <-f.started:
		t.Fatalf("run %d started: %s", n, why)
	case <-time.After(d):
	}
}

func startCoalescer(t *testing.T, c *Coalescer, fn func(context.Context, bool) error) (cancel func()) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, fn) }()
	var once sync.Once
	cancel = func() {
		once.Do(func() {
			stop()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run = %v after ctx ended, want nil", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("Run did not return after ctx ended")
			}
		})
	}
	t.Cleanup(cancel)
	return cancel
}

func TestCoalescerFoldsABurstIntoOneRun(t *testing.T) {
	f := newFakeSync()
	gate := make(chan struct{})
	f.gate = gate
	c := &Coalescer{}
	startCoalescer(t, c, f.run)
	f.waitRun(t, 1)
	// 1000 triggers from 10 goroutines while the first run goes on.
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				c.Trigger()
			}
		}()
	}
	wg.Wait()
	f.noRun(t, 50*time.Millisecond, "a trigger started a run while one was going on")
	gate <- struct{}{}
	f.waitRun(t, 2) // the burst costs one more run...
	gate <- struct{}{}
	f.noRun(t, 100*time.Millisecond, "1000 triggers during one run cost more than one more run")
	if n := f.count(); n != 2 {
		t.Fatalf("%d runs, want 2", n)
	}
	// ...and the coalescer still answers the next trigger.
	close(gate)
	c.Trigger()
	f.waitRun(t, 3)
}

func TestCoalescerNeverRunsTwiceAtOnce(t *testing.T) {
	f := newFakeSync()
	f.hold = time.Millisecond
	c := &Coalescer{}
	cancel := startCoalescer(t, c, f.run)
	f.waitRun(t, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					c.Trigger()
					time.Sleep(50 * time.Microsecond)
				}
			}
		}()
	}
	// A second Run of the same coalescer is refused, not run alongside.
	if err := c.Run(context.Background(), f.run); !errors.Is(err, ErrAlreadyRunning) {
		t.Errorf("a second Run = %v, want ErrAlreadyRunning", err)
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	cancel()
	if m := f.maxIn.Load(); m != 1 {
		t.Errorf("%d runs at once, want 1", m)
	}
	if n := f.count(); n < 3 {
		t.Errorf("only %d runs in 200ms of triggers", n)
	}
}

func TestCoalescerTriggerBeforeRun(t *testing.T) {
	f := newFakeSync()
	c := &Coalescer{}
	for range 5 {
		c.Trigger()
	}
	startCoalescer(t, c, f.run)
	f.waitRun(t, 1)
	f.noRun(t, 100*time.Millisecond, "triggers made before Run cost more than the first run")
}

func TestCoalescerMinInterval(t *testing.T) {
	f := newFakeSync()
	const gap = 40 * time.Millisecond
	c := &Coalescer{MinInterval: gap}
	cancel := startCoalescer(t, c, f.run)
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		c.Trigger()
		time.Sleep(time.Millisecond)
	}
	cancel()
	runs := f.records()
	if len(runs) < 3 {
		t.Fatalf("%d runs in 300ms of triggers, want several", len(runs))
	}
	if len(runs) > int(300*time.Millisecond/gap)+2 {
		t.Errorf("%d runs in 300ms, more than a run every %v allows", len(runs), gap)
	}
	for i := 1; i < len(runs); i++ {
		if d := runs[i].at.Sub(runs[i-1].at); d < gap {
			t.Errorf("runs %d and %d started %v apart, want at least %v", i, i+1, d, gap)
		}
	}
}

func TestCoalescerResyncIsFull(t *testing.T) {
	f := newFakeSync()
	c := &Coalescer{Resync: 20 * time.Millisecond}
	startCoalescer(t, c, f.run)
	f.waitRun(t, 1)
	f.waitRun(t, 2)
	f.waitRun(t, 3)
	c.Trigger()
	time.Sleep(5 * time.Millisecond)
	runs := f.records()
	if !runs[0].full || !runs[1].full || !runs[2].full {
		t.Errorf("first run and resyncs: full %v %v %v, want all full", runs[0].full, runs[1].full, runs[2].full)
	}
}

func TestCoalescerTriggeredRunIsNotFull(t *testing.T) {
	f := newFakeSync()
	c := &Coalescer{}
	startCoalescer(t, c, f.run)
	f.waitRun(t, 1)
	c.Trigger()
	f.waitRun(t, 2)
	runs := f.records()
	if !runs[0].full || runs[1].full {
		t.Errorf("full: first %v, triggered %v; want true, false", runs[0].full, runs[1].full)
	}
}

func TestCoalescerRetriesWithBackoff(t *testing.T) {
	f := newFakeSync()
	f.fail = 4
	var mu sync.Mutex
	var delays []time.Duration
	c := &Coalescer{RetryMin: 10 * time.Millisecond, RetryMax: 25 * time.Millisecond, OnError: func(err error, retryIn time.Duration) {
		if !errors.Is(err, errBoom) {
			t.Errorf("OnError(%v), want the run's error", err)
		}
		mu.Lock()
		delays = append(delays, retryIn)
		mu.Unlock()
	}}
	startCoalescer(t, c, f.run)
	for i := 1; i <= 5; i++ {
		f.waitRun(t, i)
	}
	f.noRun(t, 100*time.Millisecond, "a run after the failures were over, with no trigger")
	mu.Lock()
	got := append([]time.Duration(nil), delays...)
	mu.Unlock()
	want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 25 * time.Millisecond, 25 * time.Millisecond}
	if len(got) != len(want) {
		t.Fatalf("retry delays %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("retry delays %v, want %v", got, want)
		}
	}
	runs := f.records()
	for i := 1; i < len(runs); i++ {
		if !runs[i].full {
			t.Errorf("retry %d is not full", i)
		}
		if d := runs[i].at.Sub(runs[i-1].at); d < want[i-1] {
			t.Errorf("retry %d came %v after the failure, want at least %v", i, d, want[i-1])
		}
	}
}

func TestCoalescerWithoutRetryWaitsAfterAFailure(t *testing.T) {
	f := newFakeSync()
	f.fail = 1
	var errs atomic.Int32
	c := &Coalescer{OnError: func(err error, retryIn time.Duration) {
		errs.Add(1)
		if retryIn != 0 {
			t.Errorf("retryIn %v without retries", retryIn)
		}
	}}
	startCoalescer(t, c, f.run)
	f.waitRun(t, 1)
	f.noRun(t, 100*time.Millisecond, "a failed run was retried without RetryMin")
	c.Trigger()
	f.waitRun(t, 2)
	if n := errs.Load(); n != 1 {
		t.Errorf("OnError called %d times, want 1", n)
	}
}

func TestCoalescerStopsDuringMinIntervalWait(t *testing.T) {
	f := newFakeSync()
	c := &Coalescer{MinInterval: time.Hour}
	cancel := startCoalescer(t, c, f.run)
	f.waitRun(t, 1)
	c.Trigger()
	time.Sleep(10 * time.Millisecond)
	start := time.Now()
	cancel() // fails the test unless Run returns nil within 10s
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Run took %v to return while waiting for MinInterval", d)
	}
	if n := f.count(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
}
