package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"flotilla.dev/flotilla/api/agentapi"
)

var (
	// errNotSent: the tunnel closed before the request went out whole,
	// so the hub cannot have served it; it may go through another.
	errNotSent = errors.New("tunnel: closed before the request was sent")
	// errBodyClosed is what an answer's body reads once closed.
	errBodyClosed = errors.New("tunnel: read on a closed body")
)

// maxQueued bounds the bytes of one answer that came and were not read
// yet: far more than a device's lists and watch events need, far less
// than a device's memory.
var maxQueued = 64 << 20

// conn is one open tunnel.
type conn struct {
	rwc io.ReadWriteCloser

	wmu sync.Mutex // one frame written at a time

	mu     sync.Mutex
	calls  map[uint32]*call
	nextID uint32
	err    error // why it closed; nil while open

	// lastRead, lastWrite: when a frame last came and went (UnixNano).
	lastRead, lastWrite atomic.Int64
	timer               *time.Timer
}

func newConn(rwc io.ReadWriteCloser) *conn {
	c := &conn{rwc: rwc, calls: map[uint32]*call{}}
	now := time.Now().UnixNano()
	c.lastRead.Store(now)
	c.lastWrite.Store(now)
	c.timer = time.AfterFunc(agentapi.TunnelPingInterval/3, c.tick)
	go c.read()
	return c
}

func (c *conn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err != nil
}

// tick pings a tunnel that has been quiet, and closes one the hub has
// been silent on for too long (its connection may be gone without a word:
// a hub that lost power, a NAT that forgot the flow).
func (c *conn) tick() {
	if c.isClosed() {
		return
	}
	now := time.Now()
	read, wrote := time.Unix(0, c.lastRead.Load()), time.Unix(0, c.lastWrite.Load())
	if now.Sub(read) > agentapi.TunnelIdleTimeout {
		c.close(fmt.Errorf("%w: the hub sent nothing for %s", ErrClosed, now.Sub(read).Round(time.Second)))
		return
	}
	// Rearmed first: a ping that cannot be written (a dead peer) blocks
	// here until the next tick closes the tunnel.
	c.timer.Reset(agentapi.TunnelPingInterval / 3)
	if now.Sub(read) >= agentapi.TunnelPingInterval || now.Sub(wrote) >= agentapi.TunnelPingInterval {
		_ = c.write(agentapi.AppendTunnelFrame(nil, agentapi.TunnelFrame{Kind: agentapi.TunnelPing}))
	}
}

// read takes the hub's frames to the requests they answer.
func (c *conn) read() {
	for {
		f, _, err := agentapi.ReadTunnelFrame(c.rwc, nil)
		if err != nil {
			c.close(fmt.Errorf("%w: %v", ErrClosed, err))
			return
		}
		c.lastRead.Store(time.Now().UnixNano())
		switch f.Kind {
		case agentapi.TunnelHead, agentapi.TunnelData:
			if cl := c.call(f.ID, false); cl != nil {
				if f.Kind == agentapi.TunnelHead {
					cl.gotHead(f.Payload)
				} else {
					cl.push(f.Payload)
				}
			}
		case agentapi.TunnelEnd:
			if cl := c.call(f.ID, true); cl != nil {
				err := io.EOF
				if len(f.Payload) > 0 {
					err = fmt.Errorf("%w: %s", ErrClosed, f.Payload)
				}
				cl.fail(err)
			}
		case agentapi.TunnelPing:
			_ = c.write(agentapi.AppendTunnelFrame(nil, agentapi.TunnelFrame{ID: f.ID, Kind: agentapi.TunnelPong}))
		case agentapi.TunnelPong:
		default:
			c.close(fmt.Errorf("%w: the hub sent a frame of kind %d, which only devices send", ErrClosed, f.Kind))
			return
		}
	}
}

// call is the request of an id; done removes it.
func (c *conn) call(id uint32, done bool) *call {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.calls[id]
	if done {
		delete(c.calls, id)
	}
	return cl
}

// write sends frames whole; a failure closes the tunnel.
func (c *conn) write(frames []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if _, err := c.rwc.Write(frames); err != nil {
		err = fmt.Errorf("%w: %v", ErrClosed, err)
		c.close(err)
		return err
	}
	c.lastWrite.Store(time.Now().UnixNano())
	return nil
}

// close fails every request still open in the tunnel.
func (c *conn) close(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	calls := c.calls
	c.calls = nil
	c.mu.Unlock()
	c.timer.Stop()
	_ = c.rwc.Close()
	for _, cl := range calls {
		cl.fail(err)
	}
}

// cancel tells the hub that nobody waits for the request any more.
func (c *conn) cancel(id uint32) {
	if c.call(id, true) == nil {
		return // answered, or the tunnel closed
	}
	_ = c.write(agentapi.AppendTunnelFrame(nil, agentapi.TunnelFrame{ID: id, Kind: agentapi.TunnelCancel}))
}

// roundTrip sends one request, wire its HTTP/1.1 encoding, and waits for
// its answer's head.
func (c *conn) roundTrip(req *http.Request, wire []byte) (*http.Response, error) {
	cl := &call{c: c, req: req, head: make(chan result, 1), wake: make(chan struct{}, 1)}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, errNotSent
	}
	for {
		c.nextID++
		if _, busy := c.calls[c.nextID]; !busy {
			break
		}
	}
	cl.id = c.nextID
	c.calls[cl.id] = cl
	c.mu.Unlock()

	frame := agentapi.AppendTunnelFrame(make([]byte, 0, 16+len(wire)), agentapi.TunnelFrame{ID: cl.id, Kind: agentapi.TunnelRequest, Payload: wire})
	if err := c.write(frame); err != nil {
		c.call(cl.id, true)
		return nil, errNotSent
	}
	ctx := req.Context()
	cl.stop = context.AfterFunc(ctx, func() {
		cl.fail(ctx.Err())
		c.cancel(cl.id)
	})
	r := <-cl.head
	if r.err != nil {
		cl.stop()
		return nil, r.err
	}
	return r.resp, nil
}

// call is one request in the tunnel, and its answer's body.
type call struct {
	c    *conn
	id   uint32
	req  *http.Request
	head chan result // the answer's head, or why there is none; once
	wake chan struct{}
	stop func() bool // stops watching the request's context

	mu       sync.Mutex
	answered bool     // head was sent
	chunks   [][]byte // the body's bytes not read yet
	queued   int      // their length
	err      error    // how the body ends, once it has
	closed   bool     // the reader closed the body
}

type result struct {
	resp *http.Response
	err  error
}

func (cl *call) gotHead(head []byte) {
	resp, err := parseHead(head, cl.req)
	cl.mu.Lock()
	if cl.answered || cl.err != nil {
		cl.mu.Unlock()
		return
	}
	cl.answered = true
	cl.mu.Unlock()
	if err != nil {
		cl.head <- result{err: err}
		cl.fail(err)
		cl.c.cancel(cl.id)
		return
	}
	resp.Body = &body{cl: cl}
	cl.head <- result{resp: resp}
}

func (cl *call) push(p []byte) {
	cl.mu.Lock()
	if cl.closed || cl.err != nil {
		cl.mu.Unlock()
		return
	}
	cl.chunks = append(cl.chunks, p)
	cl.queued += len(p)
	over := cl.queued > maxQueued
	cl.mu.Unlock()
	if over {
		// The tunnel cannot stop the hub sending one answer without
		// stopping all of them; an answer read this slowly ends instead
		// (a watch resumes, as one the hub finds too slow does).
		cl.fail(fmt.Errorf("%w: the answer's reader fell %d bytes behind", ErrClosed, maxQueued))
		cl.c.cancel(cl.id)
		return
	}
	cl.signal()
}

// fail ends the call: io.EOF when its answer is complete.
func (cl *call) fail(err error) {
	cl.mu.Lock()
	if cl.err != nil {
		cl.mu.Unlock()
		return
	}
	cl.err = err
	answered := cl.answered
	cl.answered = true
	cl.mu.Unlock()
	if !answered {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("%w: the hub ended the request without an answer", ErrClosed)
		}
		cl.head <- result{err: err}
	}
	cl.signal()
}

func (cl *call) signal() {
	select {
	case cl.wake <- struct{}{}:
	default:
	}
}

// body is an answer's body as its frames come.
type body struct{ cl *call }

func (b *body) Read(p []byte) (int, error) {
	cl := b.cl
	for {
		cl.mu.Lock()
		if cl.closed {
			cl.mu.Unlock()
			return 0, errBodyClosed
		}
		if len(cl.chunks) > 0 {
			n := copy(p, cl.chunks[0])
			cl.queued -= n
			if n == len(cl.chunks[0]) {
				cl.chunks[0] = nil
				cl.chunks = cl.chunks[1:]
			} else {
				cl.chunks[0] = cl.chunks[0][n:]
			}
			cl.mu.Unlock()
			return n, nil
		}
		err := cl.err
		cl.mu.Unlock()
		if err != nil {
			return 0, err
		}
		<-cl.wake
	}
}

func (b *body) Close() error {
	cl := b.cl
	cl.mu.Lock()
	if cl.closed {
		cl.mu.Unlock()
		return nil
	}
	cl.closed = true
	cl.chunks = nil
	ended := cl.err != nil
	cl.mu.Unlock()
	cl.stop()
	if !ended {
		cl.c.cancel(cl.id)
	}
	cl.signal()
	return nil
}
