package run

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrAlreadyRunning is returned by Coalescer.Run while another Run of the
// same Coalescer goes on.
var ErrAlreadyRunning = errors.New("run: the coalescer already runs")

// Coalescer runs a function whenever it is triggered, folding bursts of
// triggers into one run: many changes cost one sync. Run calls the
// function on its own goroutine, one run at a time, so the function may
// rely on the goroutine's state (a locked OS thread in another network
// namespace, say).
//
// Run runs the function once at the start, then waits. Trigger marks the
// coalescer dirty and never blocks; any number of triggers before the
// next run starts cost that one run, and a trigger that comes during a
// run makes one more run after it (the function reads its inputs after
// the trigger). The mark is taken just before a run starts, so triggers
// that come while a run waits for MinInterval fold into it.
//
// Set the fields before Run; a Coalescer must not be copied once used.
type Coalescer struct {
	// MinInterval is the least time between the starts of two runs;
	// triggers in between wait and fold into one run. 0: no wait.
	MinInterval time.Duration
	// Resync, when positive, runs the function (full) at least this
	// often even when nothing triggers it.
	Resync time.Duration
	// RetryMin and RetryMax, when RetryMin is positive, run the function
	// again (full) after a failed run: RetryMin after the first failure,
	// doubling up to RetryMax while runs keep failing; a successful run
	// resets the delay. A retry once scheduled happens even if a
	// triggered run succeeds first, so that a failure is always followed
	// by a full run. With RetryMin 0 a failed run waits for the next
	// trigger or resync.
	RetryMin, RetryMax time.Duration
	// OnError, when set, is called after a failed run with its error and
	// the delay before its retry (0 without retries).
	OnError func(err error, retryIn time.Duration)

	once    sync.Once
	dirty   chan struct{}
	running atomic.Bool
}

func (c *Coalescer) init() {
	c.once.Do(func() { c.dirty = make(chan struct{}, 1) })
}

// Trigger asks for a run; it never blocks. It may be called before Run
// and from any goroutine.
func (c *Coalescer) Trigger() {
	c.init()
	select {
	case c.dirty <- struct{}{}:
	default:
	}
}

// Run calls fn at once and then whenever triggered (see Coalescer) until
// ctx ends, and returns nil then. full is true for the first run, for
// resyncs and for retries after a failure: fn should then check
// everything rather than trust what it did before. Run returns
// ErrAlreadyRunning when called while another Run goes on.
func (c *Coalescer) Run(ctx context.Context, fn func(ctx context.Context, full bool) error) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer c.running.Store(false)
	c.init()
	var resync <-chan time.Time
	if c.Resync > 0 {
		t := time.NewTicker(c.Resync)
		defer t.Stop()
		resync = t.C
	}
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	var (
		full    = true
		last    time.Time
		backoff time.Duration
	)
	for {
		// Fold bursts: never two runs closer than MinInterval.
		if wait := c.MinInterval - time.Since(last); !last.IsZero() && wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
		// Take a pending mark: this run reads its inputs after it.
		select {
		case <-c.dirty:
		default:
		}
		last = time.Now()
		if err := fn(ctx, full); err != nil {
			var retryIn time.Duration
			if c.RetryMin > 0 {
				backoff = min(max(2*backoff, c.RetryMin), max(c.RetryMax, c.RetryMin))
				retryIn = backoff
				retry.Reset(backoff)
			}
			if c.OnError != nil {
				c.OnError(err, retryIn)
			}
		} else {
			backoff = 0
		}
		full = false
		select {
		case <-ctx.Done():
			return nil
		case <-c.dirty:
		case <-resync:
			full = true
		case <-retry.C:
			full = true
		}
	}
}
