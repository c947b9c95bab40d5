package run

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var errBoom = errors.New("boom")

// waitLoop is a fake loop that works until its ctx ends and says when it
// started and when it saw the cancel.
type waitLoop struct {
	started, stopped chan struct{}
	// linger keeps it busy for a while after its ctx ends.
	linger time.Duration
	// err is what it returns once its ctx ended.
	err error
}

func newWaitLoop() *waitLoop {
	return &waitLoop{started: make(chan struct{}), stopped: make(chan struct{})}
}

func (w *waitLoop) Run(ctx context.Context) error {
	close(w.started)
	<-ctx.Done()
	time.Sleep(w.linger)
	close(w.stopped)
	return w.err
}

func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: did not happen within 10s", what)
	}
}

func runGroup(ctx context.Context, g Group) <-chan error {
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	return done
}

func TestGroupFirstErrorCancelsTheRestAndNamesTheLoop(t *testing.T) {
	a, c := newWaitLoop(), newWaitLoop()
	a.linger = 50 * time.Millisecond
	g := Group{Loops: []Loop{
		{"alpha", a.Run},
		{"beta", func(ctx context.Context) error {
			<-a.started
			return errBoom
		}},
		{"gamma", c.Run},
	}}
	var err error
	select {
	case err = <-runGroup(context.Background(), g):
	case <-time.After(10 * time.Second):
		t.Fatal("the group did not stop after a loop failed")
	}
	if !errors.Is(err, errBoom) {
		t.Fatalf("Run = %v, want it to wrap the failing loop's error", err)
	}
	if err.Error() != "beta: boom" {
		t.Errorf("Run = %q, want %q (named by the failing loop)", err, "beta: boom")
	}
	for name, l := range map[string]*waitLoop{"alpha": a, "gamma": c} {
		select {
		case <-l.stopped:
		default:
			t.Errorf("Run returned before loop %s had stopped", name)
		}
	}
}

func TestGroupOnlyTheFirstErrorCounts(t *testing.T) {
	a := newWaitLoop()
	a.err = errors.New("cancelled") // the consequence of beta's failure
	var calls atomic.Int32
	var stoppedAtOnError atomic.Bool
	g := Group{
		Loops: []Loop{
			{"alpha", a.Run},
			{"beta", func(ctx context.Context) error { <-a.started; return errBoom }},
		},
		OnError: func(err error) {
			calls.Add(1)
			select {
			case <-a.stopped:
				stoppedAtOnError.Store(true)
			default:
			}
			if err.Error() != "beta: boom" {
				t.Errorf("OnError(%q), want beta: boom", err)
			}
		},
	}
	err := g.Run(context.Background())
	if err == nil || err.Error() != "beta: boom" {
		t.Fatalf("Run = %v, want beta: boom alone", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("OnError called %d times, want once", n)
	}
	if stoppedAtOnError.Load() {
		t.Error("OnError was called after the other loops had been stopped, not as the error happened")
	}
}

func TestGroupNilReturnIsDoneAndTheOthersGoOn(t *testing.T) {
	a := newWaitLoop()
	doneEarly := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runGroup(ctx, Group{Loops: []Loop{
		{"alpha", a.Run},
		{"once", func(context.Context) error { close(doneEarly); return nil }},
	}})
	within(t, doneEarly, "the short loop returning")
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) when a loop finished without error; the others should go on", err)
	case <-a.stopped:
		t.Fatal("a loop returning nil cancelled the others")
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v after ctx ended, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
}

func TestGroupErrorsAfterCtxEndsAreDropped(t *testing.T) {
	a, b := newWaitLoop(), newWaitLoop()
	a.err, b.err = context.Canceled, errBoom
	ctx, cancel := context.WithCancel(context.Background())
	done := runGroup(ctx, Group{Loops: []Loop{{"alpha", a.Run}, {"beta", b.Run}}, OnError: func(err error) {
		t.Errorf("OnError(%v) for an error that followed the end of ctx", err)
	}})
	within(t, a.started, "alpha starting")
	within(t, b.started, "beta starting")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil: the loops failed because ctx ended", err)
	}
}

func TestGroupWaitsForEveryLoop(t *testing.T) {
	a := newWaitLoop()
	a.linger = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := runGroup(ctx, Group{Loops: []Loop{{"alpha", a.Run}}})
	within(t, a.started, "alpha starting")
	cancel()
	<-done
	select {
	case <-a.stopped:
	default:
		t.Fatal("Run returned while a loop was still stopping")
	}
}

func TestGroupWithoutLoops(t *testing.T) {
	select {
	case err := <-runGroup(context.Background(), Group{}):
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an empty group did not return")
	}
}

func TestGroupErrorNamesWrap(t *testing.T) {
	var target *pathErr
	err := Group{Loops: []Loop{{"disk", func(context.Context) error { return &pathErr{"/x"} }}}}.Run(context.Background())
	if !errors.As(err, &target) || target.path != "/x" || !strings.HasPrefix(err.Error(), "disk: ") {
		t.Fatalf("Run = %v, want a named error that unwraps to the loop's", err)
	}
}

type pathErr struct{ path string }

func (e *pathErr) Error() string { return "bad path " + e.path }
