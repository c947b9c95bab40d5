package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	gwebsocket "github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	pf "k8s.io/apimachinery/pkg/util/portforward"
)

// serveExec runs a command in a container: /exec/<ns>/<pod>/<container>.
func (s *Server) serveExec(w http.ResponseWriter, r *http.Request) {
	ref := ContainerRef{r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")}
	if err := checkNames(ref.Namespace, ref.Pod, ref.Container); err != nil {
		writeErr(w, err)
		return
	}
	o, err := parseExecOptions(r.URL.Query(), true)
	if err != nil {
		writeErr(w, err)
		return
	}
	sess := s.openSession(w, r, o)
	if sess == nil {
		return
	}
	defer sess.close()
	ctx, cancel := sess.context(r.Context())
	defer cancel()
	start := time.Now()
	code, err := s.cfg.Streamer.Exec(ctx, ref, o.command, sess.streams)
	sess.report(code, err)
	s.log.Info("exec ended", "container", ref.String(), "command", o.command, "tty", o.tty, "exitCode", code, "err", err, "took", time.Since(start).Round(time.Millisecond))
}

// serveAttach joins a container's main process:
// /attach/<ns>/<pod>/<container>. A container started with stdin or a
// terminal (stdin: true or tty: true in its spec) is attached to as the
// kubelet does, its output and, with input=1, its stdin (see
// Streamer.Attach). Any other container has no stdin (its output goes
// straight to the log driver), so attach follows the current attempt's
// log, stdout and stderr together, until the container stops or the
// client leaves; asking it for stdin is refused before the upgrade.
func (s *Server) serveAttach(w http.ResponseWriter, r *http.Request) {
	ref := ContainerRef{r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")}
	if err := checkNames(ref.Namespace, ref.Pod, ref.Container); err != nil {
		writeErr(w, err)
		return
	}
	o, err := parseExecOptions(r.URL.Query(), false)
	if err != nil {
		writeErr(w, err)
		return
	}
	mode, err := s.cfg.Streamer.AttachMode(r.Context(), ref)
	if err != nil {
		writeErr(w, err)
		return
	}
	if o.stdin && !mode.Stdin {
		writeErr(w, fmt.Errorf("%w: container %s in pod %s/%s does not have stdin enabled (its spec does not set stdin: true): attach without -i for its output, or use kubectl exec -i", ErrBadRequest, ref.Container, ref.Namespace, ref.Pod))
		return
	}
	if !mode.Stdin && !mode.TTY {
		s.followAttach(w, r, ref, o)
		return
	}
	sess := s.openSession(w, r, o)
	if sess == nil {
		return
	}
	defer sess.close()
	ctx, cancel := sess.context(r.Context())
	defer cancel()
	err = s.cfg.Streamer.Attach(ctx, ref, sess.streams)
	if ctx.Err() != nil {
		err = nil
	}
	sess.report(0, err)
	s.log.Info("attach ended", "container", ref.String(), "stdin", o.stdin, "tty", o.tty, "err", err)
}

// followAttach is attach to a container without stdin or a terminal: its
// log from now on.
func (s *Server) followAttach(w http.ResponseWriter, r *http.Request, ref ContainerRef, o execOptions) {
	lref, err := s.finder.find(ref.Namespace, ref.Pod, ref.Container, false)
	if err != nil {
		writeErr(w, err)
		return
	}
	sess := s.openSession(w, r, o)
	if sess == nil {
		return
	}
	defer sess.close()
	ctx, cancel := sess.context(r.Context())
	defer cancel()
	out := sess.streams.Stdout
	if out == nil {
		out = sess.streams.Stderr
	}
	if out == nil {
		out = io.Discard
	}
	fl := &follower{poll: s.cfg.Poll, running: s.cfg.ContainerRunning, idleChecks: 8}
	err = readLogs(ctx, out, lref, LogOptions{Follow: true, TailLines: 0}, fl)
	if ctx.Err() != nil {
		err = nil
	}
	sess.report(0, err)
	s.log.Info("attach ended", "container", ref.String(), "err", err)
}

// context is the session's: it ends when the client's connection does
// (a hijacked request's own context does not see that).
func (sess *session) context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	if sess.closed != nil {
		go func() {
			select {
			case <-sess.closed:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	return ctx, cancel
}

// servePortForward forwards connections to the pod's ports over SPDY
// (portforward.k8s.io), plain or tunneled over a WebSocket (the
// SPDY/3.1+portforward.k8s.io subprotocol kubectl 1.30+ asks for first).
func (s *Server) servePortForward(w http.ResponseWriter, r *http.Request) {
	ns, pod := r.PathValue("namespace"), r.PathValue("pod")
	if err := checkNames(ns, pod, "x"); err != nil {
		writeErr(w, err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	fw := &forwarder{s: s, ctx: ctx, namespace: ns, pod: pod, streams: make(chan httpstream.Stream)}
	var conn httpstream.Connection
	switch {
	case wsstream.IsWebSocketRequestWithTunnelingProtocol(r):
		up := gwebsocket.Upgrader{
			Subprotocols: []string{pf.WebsocketsSPDYTunnelingPortForwardV1},
			// The hub is the only client (checked by certificate), not a browser.
			CheckOrigin: func(*http.Request) bool { return true },
		}
		ws, err := up.Upgrade(hijackClearingDeadlines(w), r, nil)
		if err != nil {
			return // the upgrader answered
		}
		if ws.Subprotocol() != pf.WebsocketsSPDYTunnelingPortForwardV1 {
			ws.WriteControl(gwebsocket.CloseMessage, gwebsocket.FormatCloseMessage(gwebsocket.CloseProtocolError, "ask for the "+pf.WebsocketsSPDYTunnelingPortForwardV1+" subprotocol"), time.Now().Add(time.Second))
			ws.Close()
			return
		}
		if conn, err = spdy.NewServerConnection(&wsConn{ws: ws}, fw.newStream); err != nil {
			ws.Close()
			return
		}
	case wsstream.IsWebSocketRequest(r):
		writeErr(w, fmt.Errorf("%w: port forwarding over WebSocket channels is not served; use SPDY, or SPDY tunneled over WebSocket (subprotocol %s)", ErrBadRequest, pf.WebsocketsSPDYTunnelingPortForwardV1))
		return
	default:
		if _, err := httpstream.Handshake(r, w, []string{pf.PortForwardV1Name}); err != nil {
			return // Handshake answered
		}
		if conn = spdy.NewResponseUpgrader().UpgradeResponse(hijackClearingDeadlines(w), r, fw.newStream); conn == nil {
			return // the upgrader answered
		}
	}
	defer conn.Close()
	conn.SetIdleTimeout(StreamIdleTimeout)
	fw.conn = conn
	s.log.Info("port forward started", "pod", ns+"/"+pod)
	fw.run()
	s.log.Info("port forward ended", "pod", ns+"/"+pod)
}

// forwarder pairs the streams the client opens per forwarded connection
// (an error and a data stream with the same requestID) and forwards each
// pair to the pod.
type forwarder struct {
	s              *Server
	ctx            context.Context
	conn           httpstream.Connection
	namespace, pod string
	streams        chan httpstream.Stream
}

func (f *forwarder) newStream(st httpstream.Stream, _ <-chan struct{}) error {
	select {
	case f.streams <- st:
		return nil
	case <-f.ctx.Done():
		return errors.New("the port forward has ended")
	}
}

type streamPair struct{ data, err httpstream.Stream }

func (f *forwarder) run() {
	var wg sync.WaitGroup
	defer wg.Wait()
	pairs := map[string]*streamPair{}
	for {
		select {
		case <-f.conn.CloseChan():
			return
		case <-f.ctx.Done():
			return
		case st := <-f.streams:
			id := st.Headers().Get(corev1.PortForwardRequestIDHeader)
			if id == "" {
				st.Reset()
				continue
			}
			p := pairs[id]
			if p == nil {
				p = &streamPair{}
				pairs[id] = p
			}
			switch st.Headers().Get(corev1.StreamType) {
			case corev1.StreamTypeData:
				p.data = st
			case corev1.StreamTypeError:
				p.err = st
			default:
				st.Reset()
				continue
			}
			if p.data != nil && p.err != nil {
				delete(pairs, id)
				wg.Add(1)
				go func() {
					defer wg.Done()
					f.forward(p)
				}()
			}
		}
	}
}

func (f *forwarder) forward(p *streamPair) {
	defer f.conn.RemoveStreams(p.data, p.err)
	defer p.err.Close()
	defer p.data.Close()
	ps := p.data.Headers().Get(corev1.PortHeader)
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || port == 0 {
		fmt.Fprintf(p.err, "port %q is not a port number (1-65535)", ps)
		return
	}
	c, err := f.s.cfg.Streamer.DialPod(f.ctx, f.namespace, f.pod, uint16(port))
	if err != nil {
		fmt.Fprintf(p.err, "error forwarding port %d to pod %s/%s: %v", port, f.namespace, f.pod, err)
		return
	}
	defer c.Close()
	in := make(chan struct{})
	go func() {
		defer close(in)
		io.Copy(c, p.data)
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	}()
	io.Copy(p.data, c)
	p.data.Close()
	select { // the client's side may still be sending
	case <-in:
	case <-f.conn.CloseChan():
	case <-f.ctx.Done():
	}
}

// wsConn is a WebSocket carrying a byte stream in binary messages, the
// tunnel kubectl's SPDY-over-WebSocket dialer speaks.
type wsConn struct {
	ws  *gwebsocket.Conn
	cur io.Reader
	wmu sync.Mutex
}

func (c *wsConn) Read(p []byte) (int, error) {
	for {
		if c.cur == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				var ce *gwebsocket.CloseError
				if errors.As(err, &ce) && ce.Code == gwebsocket.CloseNormalClosure {
					return 0, io.EOF
				}
				return 0, err
			}
			if typ != gwebsocket.BinaryMessage {
				return 0, fmt.Errorf("tunnel: a WebSocket message of type %d, not binary", typ)
			}
			c.cur = r
		}
		n, err := c.cur.Read(p)
		if errors.Is(err, io.EOF) {
			c.cur = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

func (c *wsConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.ws.WriteMessage(gwebsocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *wsConn) Close() error {
	c.ws.WriteControl(gwebsocket.CloseMessage, gwebsocket.FormatCloseMessage(gwebsocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	return c.ws.Close()
}

func (c *wsConn) LocalAddr() net.Addr  { return c.ws.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr { return c.ws.RemoteAddr() }
func (c *wsConn) SetDeadline(t time.Time) error {
	return errors.Join(c.ws.SetReadDeadline(t), c.ws.SetWriteDeadline(t))
}
func (c *wsConn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *wsConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }
