package apiserver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api/agentapi"
)

// Device tunnels (agentapi.PathTunnel): a device's requests on one
// connection the hub reads with one goroutine, instead of an HTTP/2
// connection with its serving and reading goroutines, header tables and
// per-stream writers. Each request in a tunnel is served by ServeHTTP as
// if it had come on a connection of its own, with the tunnel's TLS state:
// authenticated, rate limited, authorized and recorded the same way.

const (
	// tunnelInFlight bounds one tunnel's requests being served at once;
	// past it the hub stops reading the tunnel until one ends. A device
	// has its watch stream and a few writes open at a time.
	tunnelInFlight = 32
	// tunnelWriteTimeout: a frame the device has not taken in this long
	// means it is gone (or so slow that its watches would fall behind).
	tunnelWriteTimeout = time.Minute
	// tunnelChunk bounds a data frame, and the bytes a response gathers
	// before it sends them without being flushed.
	tunnelChunk = 32 << 10
	// tunnelMaxHead bounds a request's line and headers, as the HTTP
	// server's MaxHeaderBytes does on a connection of its own.
	tunnelMaxHead = 64 << 10
	// tunnelMaxRequest bounds a request frame: its head and the largest
	// body the hub takes.
	tunnelMaxRequest = tunnelMaxHead + maxBodyBytes
)

// tunnels are the hub's open tunnels, closed when the hub shuts down (a
// tunnel's connection is hijacked: the HTTP server no longer knows it).
type tunnels struct {
	mu   sync.Mutex
	open map[*tunnel]struct{}
}

func (ts *tunnels) add(t *tunnel) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.open == nil {
		return false // closed
	}
	ts.open[t] = struct{}{}
	return true
}

func (ts *tunnels) remove(t *tunnel) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	delete(ts.open, t)
}

func (ts *tunnels) count() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.open)
}

// CloseTunnels closes every device tunnel and refuses new ones: the
// HTTP server's Shutdown does not see hijacked connections
// (http.Server.RegisterOnShutdown).
func (s *Server) CloseTunnels() {
	s.tunnels.mu.Lock()
	open := s.tunnels.open
	s.tunnels.open = nil
	s.tunnels.mu.Unlock()
	for t := range open {
		t.close()
	}
}

// serveTunnel answers a GET of agentapi.PathTunnel: it takes the
// connection over and serves the tunnel's requests from then on.
func (s *Server) serveTunnel(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 1 || !httpguts.HeaderValuesContainsToken(r.Header["Connection"], "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), agentapi.TunnelProtocol) {
		w.Header().Set("Upgrade", agentapi.TunnelProtocol)
		w.Header().Set("Connection", "Upgrade")
		s.writeError(w, r, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUpgradeRequired,
			Message: fmt.Sprintf("%s is a tunnel: send GET over HTTP/1.1 with \"Connection: Upgrade\" and \"Upgrade: %s\" (this request came over HTTP/%d with Upgrade %q)",
				agentapi.PathTunnel, agentapi.TunnelProtocol, r.ProtoMajor, r.Header.Get("Upgrade"))}}, nil)
		return
	}
	if r.Method != http.MethodGet {
		s.writeError(w, r, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusMethodNotAllowed,
			Reason: metav1.StatusReasonMethodNotAllowed, Message: fmt.Sprintf("%s takes GET, not %s", agentapi.PathTunnel, r.Method)}}, nil)
		return
	}
	conn, rw, err := http.NewResponseController(w).Hijack()
	if errors.Is(err, http.ErrNotSupported) {
		s.writeError(w, r, badRequest("%s cannot be opened inside a tunnel", agentapi.PathTunnel), nil)
		return
	}
	if err != nil {
		s.writeError(w, r, apierrors.NewInternalError(fmt.Errorf("taking the connection over for a tunnel: %w", err)), nil)
		return
	}
	if rec, ok := w.(*statusRecorder); ok {
		rec.status = http.StatusSwitchingProtocols
	}
	// The device sends nothing before it reads the answer; whatever the
	// server's reader holds is the tunnel's all the same.
	var in io.Reader = conn
	if n := rw.Reader.Buffered(); n > 0 {
		early, _ := rw.Reader.Peek(n)
		in = io.MultiReader(bytes.NewReader(bytes.Clone(early)), conn)
	}
	_ = conn.SetDeadline(time.Now().Add(tunnelWriteTimeout))
	_, err = io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+agentapi.TunnelProtocol+"\r\n\r\n")
	_ = conn.SetDeadline(time.Time{})
	if err != nil {
		_ = conn.Close()
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &tunnel{s: s, conn: conn, in: in, tls: r.TLS, remote: r.RemoteAddr, ctx: ctx, cancel: cancel,
		slots: make(chan struct{}, tunnelInFlight)}
	if !s.tunnels.add(t) {
		cancel()
		_ = conn.Close()
		return
	}
	go t.run()
}

// tunnel is one device's tunnel.
type tunnel struct {
	s      *Server
	conn   net.Conn
	in     io.Reader
	tls    *tls.ConnectionState
	remote string
	// ctx is every request's in the tunnel: closing the tunnel ends them.
	ctx    context.Context
	cancel context.CancelFunc
	slots  chan struct{}

	mu   sync.Mutex
	reqs map[uint32]context.CancelFunc // the requests being served

	wmu  sync.Mutex // one frame written at a time
	werr error
}

// run reads the tunnel until it fails or closes. It is the tunnel's only
// goroutine while no request is being served.
func (t *tunnel) run() {
	defer t.close()
	for {
		_ = t.conn.SetReadDeadline(time.Now().Add(agentapi.TunnelIdleTimeout))
		f, n, err := agentapi.ReadTunnelHeader(t.in)
		if err == nil && f.Kind == agentapi.TunnelRequest {
			err = t.request(f.ID, n)
		} else if err == nil && n > 0 {
			err = fmt.Errorf("a frame of kind %d with a payload of %d bytes: only requests have one", f.Kind, n)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				t.s.log.Debug("device tunnel closed", "remote", t.remote, "err", err)
			}
			return
		}
		switch f.Kind {
		case agentapi.TunnelRequest:
		case agentapi.TunnelCancel:
			t.mu.Lock()
			if cancel := t.reqs[f.ID]; cancel != nil {
				cancel()
			}
			t.mu.Unlock()
		case agentapi.TunnelPing:
			if t.write(agentapi.AppendTunnelFrame(nil, agentapi.TunnelFrame{ID: f.ID, Kind: agentapi.TunnelPong})) != nil {
				return
			}
		case agentapi.TunnelPong:
		default:
			t.s.log.Warn("device tunnel closed: the device sent a frame only the hub sends", "remote", t.remote, "kind", f.Kind)
			return
		}
	}
}

// request reads a request of n bytes and serves it. The bytes are
// charged to the hub's budget for request bodies until it ends, as the
// body of a request on a connection of its own is while it is read; a
// request past the budget or too large is read, dropped and refused.
func (t *tunnel) request(id uint32, n int) error {
	var refusal error
	switch {
	case n > tunnelMaxRequest:
		refusal = apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("a request in a tunnel holds at most %d bytes (a body of %d, and its headers); send a smaller object", tunnelMaxRequest, maxBodyBytes))
	case !t.s.limits.bodies.charge(int64(n)):
		refusal = apierrors.NewTooManyRequests("the hub is receiving too many request bodies at once; retry later", 1)
	}
	if refusal != nil {
		if _, err := io.CopyN(io.Discard, t.in, int64(n)); err != nil {
			return err
		}
		tw := &tunnelWriter{t: t, id: id, header: http.Header{}}
		t.refuse(tw, refusal)
		return tw.err
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(t.in, payload); err != nil {
		t.s.limits.bodies.refund(int64(n))
		return err
	}
	select {
	case t.slots <- struct{}{}:
	case <-t.ctx.Done():
		t.s.limits.bodies.refund(int64(n))
		return t.ctx.Err()
	}
	ctx, cancel := context.WithCancel(t.ctx)
	if !t.start(id, cancel) {
		cancel()
		<-t.slots
		t.s.limits.bodies.refund(int64(n))
		return fmt.Errorf("the device reused the id %d of a request still open", id)
	}
	go func() {
		defer t.s.limits.bodies.refund(int64(n))
		t.serve(ctx, id, payload)
	}()
	return nil
}

// refuse answers a request of the tunnel that is not served with err,
// as ServeHTTP answers one it refuses.
func (t *tunnel) refuse(tw *tunnelWriter, err error) {
	t.s.writeError(tw, &http.Request{Method: http.MethodGet, URL: &url.URL{Path: agentapi.PathTunnel}, Header: http.Header{}}, err, nil)
	tw.finish()
}

func (t *tunnel) start(id uint32, cancel context.CancelFunc) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, busy := t.reqs[id]; busy {
		return false
	}
	if t.reqs == nil {
		t.reqs = make(map[uint32]context.CancelFunc)
	}
	t.reqs[id] = cancel
	return true
}

func (t *tunnel) done(id uint32) {
	t.mu.Lock()
	cancel := t.reqs[id]
	delete(t.reqs, id)
	if len(t.reqs) == 0 {
		// A device that sent a burst does not keep its map for hours.
		t.reqs = nil
	}
	t.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	<-t.slots
}

// serve serves one request of the tunnel as ServeHTTP serves any.
func (t *tunnel) serve(ctx context.Context, id uint32, payload []byte) {
	tw := &tunnelWriter{t: t, id: id, header: http.Header{}}
	defer t.done(id)
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				tw.abort("the hub aborted the answer")
				return
			}
			t.s.log.Error("panic serving a tunnel's request", "remote", t.remote, "panic", p)
			tw.abort("the hub failed serving the request")
		}
	}()
	if end := bytes.Index(payload[:min(len(payload), tunnelMaxHead)], []byte("\r\n\r\n")); end < 0 && len(payload) >= tunnelMaxHead {
		t.refuse(tw, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusRequestHeaderFieldsTooLarge,
			Message: fmt.Sprintf("tunnel: request %d has more than %d bytes of request line and headers", id, tunnelMaxHead)}})
		return
	}
	// The request's body reads from this reader for as long as the
	// request lasts (a device's watch stream: hours), so it is no larger
	// than the request.
	req, err := http.ReadRequest(bufio.NewReaderSize(bytes.NewReader(payload), len(payload)))
	if err != nil {
		http.Error(tw, fmt.Sprintf("tunnel: request %d is not an HTTP/1.1 request: %v", id, err), http.StatusBadRequest)
		tw.finish()
		return
	}
	req = req.WithContext(ctx)
	req.RemoteAddr, req.TLS = t.remote, t.tls
	t.s.ServeHTTP(tw, req)
	tw.finish()
}

// write sends frames whole; the first failure closes the tunnel.
func (t *tunnel) write(frames []byte) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if t.werr != nil {
		return t.werr
	}
	_ = t.conn.SetWriteDeadline(time.Now().Add(tunnelWriteTimeout))
	if _, err := t.conn.Write(frames); err != nil {
		t.werr = err
		_ = t.conn.Close()
		return err
	}
	return nil
}

func (t *tunnel) close() {
	t.cancel()
	_ = t.conn.Close()
	t.s.tunnels.remove(t)
}

// tunnelWriter is the ResponseWriter of a request served in a tunnel: it
// gathers the answer's frames and sends them when flushed, when they
// reach tunnelChunk, and when the answer ends.
type tunnelWriter struct {
	t      *tunnel
	id     uint32
	header http.Header
	code   int
	frames *[]byte // nil while nothing waits to be sent
	err    error
}

// tunnelBuffers keeps the frame buffers of answers between their writes:
// a device's watch stream, open for hours, holds none while it waits.
var tunnelBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

func (tw *tunnelWriter) Header() http.Header { return tw.header }

func (tw *tunnelWriter) WriteHeader(code int) {
	if tw.code != 0 || code < 200 {
		return // (informational answers are not passed on)
	}
	tw.code = code
	if tw.header.Get("Date") == "" {
		tw.header.Set("Date", tw.t.s.now().UTC().Format(http.TimeFormat))
	}
	var head bytes.Buffer
	head.WriteString("HTTP/1.1 " + strconv.Itoa(code) + " " + http.StatusText(code) + "\r\n")
	_ = tw.header.Write(&head)
	head.WriteString("\r\n")
	tw.append(agentapi.TunnelFrame{ID: tw.id, Kind: agentapi.TunnelHead, Payload: head.Bytes()})
}

func (tw *tunnelWriter) Write(p []byte) (int, error) {
	if tw.code == 0 {
		tw.WriteHeader(http.StatusOK)
	}
	if tw.err != nil {
		return 0, tw.err
	}
	n := len(p)
	for len(p) > 0 {
		c := p[:min(len(p), tunnelChunk)]
		p = p[len(c):]
		tw.append(agentapi.TunnelFrame{ID: tw.id, Kind: agentapi.TunnelData, Payload: c})
		if len(*tw.frames) >= tunnelChunk {
			tw.send()
			if tw.err != nil {
				return n - len(p) - len(c), tw.err
			}
		}
	}
	return n, nil
}

// Flush sends what was gathered.
func (tw *tunnelWriter) Flush() {
	if tw.code == 0 {
		tw.WriteHeader(http.StatusOK)
	}
	tw.send()
}

func (tw *tunnelWriter) send() {
	if tw.frames == nil {
		return
	}
	if tw.err == nil {
		tw.err = tw.t.write(*tw.frames)
	}
	if cap(*tw.frames) <= 64<<10 {
		*tw.frames = (*tw.frames)[:0]
		tunnelBuffers.Put(tw.frames)
	}
	tw.frames = nil
}

func (tw *tunnelWriter) append(f agentapi.TunnelFrame) {
	if tw.frames == nil {
		tw.frames = tunnelBuffers.Get().(*[]byte)
	}
	*tw.frames = agentapi.AppendTunnelFrame(*tw.frames, f)
}

// finish ends the answer.
func (tw *tunnelWriter) finish() {
	if tw.code == 0 {
		tw.WriteHeader(http.StatusOK)
	}
	tw.append(agentapi.TunnelFrame{ID: tw.id, Kind: agentapi.TunnelEnd})
	tw.Flush()
}

// abort ends an answer cut short: the device reads an error from its body
// (or, before the head, from the request).
func (tw *tunnelWriter) abort(why string) {
	tw.append(agentapi.TunnelFrame{ID: tw.id, Kind: agentapi.TunnelEnd, Payload: []byte(why)})
	tw.send()
}
