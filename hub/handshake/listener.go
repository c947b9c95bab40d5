package handshake

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults for the zero Options.
const (
	DefaultMaxWait    = 5 * time.Second
	DefaultTimeout    = 10 * time.Second
	DefaultMaxPending = 16384
	perCPU            = 128
	minConcurrency    = 256
)

// Options tune a Listener; the zero value is the production default.
type Options struct {
	// Concurrency is how many handshakes run at once; 0 means 128 per
	// CPU, at least 256. A handshake mostly waits for its client's
	// answers (a device on a slow link, a busy device), so many more run
	// than there are cores: too few would leave the hub idle while
	// connections wait, and under a steady stream of new ones the oldest
	// would wait past MaxWait. Few enough that their CPU is shared by
	// hundreds, not by a whole fleet.
	Concurrency int
	// MaxWait is how long an accepted connection may wait for its
	// handshake to begin; one that waited longer is closed unanswered (0:
	// DefaultMaxWait). It is below client-go's 10 s handshake timeout, so
	// that little of a handshake's time is spent queueing.
	MaxWait time.Duration
	// Timeout bounds a handshake itself (0: DefaultTimeout).
	Timeout time.Duration
	// MaxPending bounds the connections waiting; past it the oldest is
	// closed (0: DefaultMaxPending).
	MaxPending int
	// Registerer receives the listener's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger for handshake failures (at debug level) and accept errors;
	// nil means slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Concurrency <= 0 {
		o.Concurrency = max(perCPU*runtime.GOMAXPROCS(0), minConcurrency)
	}
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Listener accepts connections from an inner listener and hands out
// *tls.Conn whose handshake is complete. http.Server serves such
// connections as it does those of tls.NewListener (HTTP/2 included: the
// protocol was negotiated in the handshake).
type Listener struct {
	inner net.Listener
	cfg   *tls.Config
	opts  Options
	log   *slog.Logger
	met   *metrics

	mu      sync.Mutex
	wake    *sync.Cond
	pending []waiting // the newest last
	closed  bool

	ready chan net.Conn
	done  chan struct{}
	err   error // why done was closed; set before
	stop  sync.Once
	wg    sync.WaitGroup
}

type waiting struct {
	conn net.Conn
	at   time.Time
}

var _ net.Listener = (*Listener)(nil)

// NewListener starts accepting on inner, with cfg as the server's TLS
// configuration. Close stops it and closes inner.
func NewListener(inner net.Listener, cfg *tls.Config, opts Options) (*Listener, error) {
	opts = opts.withDefaults()
	l := &Listener{
		inner: inner,
		cfg:   cfg,
		opts:  opts,
		log:   opts.Logger,
		ready: make(chan net.Conn),
		done:  make(chan struct{}),
	}
	l.wake = sync.NewCond(&l.mu)
	if opts.Registerer != nil {
		m, err := newMetrics(opts.Registerer, l)
		if err != nil {
			return nil, err
		}
		l.met = m
	}
	l.wg.Add(1 + opts.Concurrency)
	go l.acceptLoop()
	for range opts.Concurrency {
		go l.handshakeLoop()
	}
	return l, nil
}

// Accept returns the next connection whose handshake completed.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		return nil, l.err
	}
}

// Addr is the inner listener's.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// Close stops accepting, closes the connections still waiting or in a
// handshake, and waits for its goroutines.
func (l *Listener) Close() error {
	err := l.inner.Close()
	l.shut(net.ErrClosed)
	l.wg.Wait()
	l.met.unregister()
	return err
}

// shut ends the listener with err, which Accept returns from then on.
func (l *Listener) shut(err error) {
	l.stop.Do(func() {
		l.err = err
		close(l.done)
		l.mu.Lock()
		l.closed = true
		for _, w := range l.pending {
			_ = w.conn.Close()
		}
		l.pending = nil
		l.mu.Unlock()
		l.wake.Broadcast()
	})
}

// acceptLoop takes connections from the kernel as fast as they come, so
// that the order of handshakes is this package's, not the accept queue's.
func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	var backoff time.Duration
	for {
		c, err := l.inner.Accept()
		if err != nil {
			if !temporary(err) {
				l.shut(err)
				return
			}
			// Out of file descriptors during a storm, say: wait for
			// connections to close, as http.Server does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			l.log.Warn("accepting a connection failed; retrying", "err", err, "in", backoff)
			select {
			case <-time.After(backoff):
				continue
			case <-l.done:
				return
			}
		}
		backoff = 0
		l.push(c)
	}
}

func temporary(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

func (l *Listener) push(c net.Conn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		_ = c.Close()
		return
	}
	if len(l.pending) >= l.opts.MaxPending {
		oldest := l.pending[0]
		l.pending = append(l.pending[:0], l.pending[1:]...)
		_ = oldest.conn.Close()
		l.met.observe(resultDropped)
	}
	l.pending = append(l.pending, waiting{conn: c, at: time.Now()})
	l.mu.Unlock()
	l.wake.Signal()
}

// pop takes the newest waiting connection; ok is false once the listener
// is closed.
func (l *Listener) pop() (waiting, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.pending) == 0 && !l.closed {
		l.wake.Wait()
	}
	if l.closed {
		return waiting{}, false
	}
	n := len(l.pending) - 1
	w := l.pending[n]
	l.pending[n] = waiting{}
	l.pending = l.pending[:n]
	return w, true
}

func (l *Listener) handshakeLoop() {
	defer l.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-l.done
		cancel()
	}()
	for {
		w, ok := l.pop()
		if !ok {
			return
		}
		waited := time.Since(w.at)
		l.met.observeWait(waited)
		if waited > l.opts.MaxWait {
			_ = w.conn.Close()
			l.met.observe(resultDropped)
			continue
		}
		tc := tls.Server(w.conn, l.cfg)
		hctx, hcancel := context.WithTimeout(ctx, l.opts.Timeout)
		began := time.Now()
		err := tc.HandshakeContext(hctx)
		hcancel()
		l.met.observeHandshake(time.Since(began))
		if err != nil {
			_ = tc.Close()
			l.met.observe(resultFailed)
			l.log.Debug("TLS handshake failed", "remote", w.conn.RemoteAddr(), "err", err)
			continue
		}
		l.met.observe(resultDone)
		select {
		case l.ready <- tc:
		case <-l.done:
			_ = tc.Close()
			return
		}
	}
}

func (l *Listener) waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending)
}
