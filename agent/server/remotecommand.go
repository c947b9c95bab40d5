package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	rc "k8s.io/apimachinery/pkg/util/remotecommand"
)

// Streamer runs what /exec, /attach and /portForward ask for on this
// device.
type Streamer interface {
	// Exec runs cmd in the named running container with the streams and
	// returns its exit code; an error means it could not be run (a
	// container that is not running: ErrNotFound).
	Exec(ctx context.Context, ref ContainerRef, cmd []string, s Streams) (int, error)
	// DialPod connects to port on the pod's loopback, inside its network
	// namespace (ErrNotFound when the pod has no sandbox here).
	DialPod(ctx context.Context, namespace, pod string, port uint16) (net.Conn, error)
	// AttachMode says how the named running container's process was
	// started (ErrNotFound when it is not running here).
	AttachMode(ctx context.Context, ref ContainerRef) (AttachMode, error)
	// Attach joins the main process of a container started with stdin or
	// a terminal: its output from now on and, with s.Stdin, its stdin,
	// until the process's output ends, ctx ends, or s.Stdin ends (which
	// closes the process's stdin if it was started with stdinOnce and no
	// terminal, and otherwise ends only the session).
	Attach(ctx context.Context, ref ContainerRef, s Streams) error
}

// AttachMode is a container's stdin, stdinOnce and tty, as its pod spec
// set them when it started.
type AttachMode struct{ Stdin, StdinOnce, TTY bool }

// ContainerRef names a pod's container.
type ContainerRef struct{ Namespace, Pod, Container string }

func (c ContainerRef) String() string { return c.Namespace + "/" + c.Pod + "/" + c.Container }

// Streams are a session's streams; a nil one was not asked for (Stderr
// is always nil with a TTY, which merges it into Stdout).
type Streams struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	TTY            bool
	// Resize brings the terminal's size as the client changes it; closed
	// when the session ends.
	Resize <-chan TermSize
}

// TermSize is a terminal's size in characters (remotecommand's
// TerminalSize on the wire).
type TermSize struct{ Width, Height uint16 }

// Stream timeouts: the client opens its streams right after the upgrade;
// an idle session (no data either way, no SPDY ping) ends after
// StreamIdleTimeout, the kubelet's default.
const (
	StreamCreationTimeout = rc.DefaultStreamCreationTimeout
	StreamIdleTimeout     = 4 * time.Hour
)

// The SPDY versions of the remote command protocol served: v4 reports the
// exit code in a Status, v3 adds resizing; v1's stream quirks are not
// supported (no client of the last ten years speaks only v1).
var spdyExecProtocols = []string{rc.StreamProtocolV4Name, rc.StreamProtocolV3Name, rc.StreamProtocolV2Name}

// statusProtocols report errors as a metav1.Status with the exit code;
// the older ones as text.
var statusProtocols = map[string]bool{
	rc.StreamProtocolV4Name: true, rc.StreamProtocolV5Name: true,
	"v4.base64.channel.k8s.io": true,
}

// execOptions is a request's query, under the names kube-apiserver sends
// the kubelet (input, output, error) or PodExecOptions' (stdin, stdout,
// stderr).
type execOptions struct {
	command                    []string
	stdin, stdout, stderr, tty bool
}

func parseExecOptions(q map[string][]string, needCommand bool) (execOptions, error) {
	var o execOptions
	flag := func(dst *bool, names ...string) error {
		for _, n := range names {
			if v := q[n]; len(v) > 0 && v[0] != "" {
				b, err := strconv.ParseBool(v[0])
				if err != nil {
					return fmt.Errorf("%w: %s=%q is not 1, 0, true or false", ErrBadRequest, n, v[0])
				}
				*dst = *dst || b
			}
		}
		return nil
	}
	for _, f := range []struct {
		dst   *bool
		names []string
	}{
		{&o.stdin, []string{corev1.ExecStdinParam, "stdin"}},
		{&o.stdout, []string{corev1.ExecStdoutParam, "stdout"}},
		{&o.stderr, []string{corev1.ExecStderrParam, "stderr"}},
		{&o.tty, []string{corev1.ExecTTYParam}},
	} {
		if err := flag(f.dst, f.names...); err != nil {
			return o, err
		}
	}
	o.command = q[corev1.ExecCommandParam]
	if needCommand && len(o.command) == 0 {
		return o, fmt.Errorf("%w: no command: give it as command=<arg>, one per argument", ErrBadRequest)
	}
	if !o.stdin && !o.stdout && !o.stderr {
		return o, fmt.Errorf("%w: you must specify at least 1 of stdin, stdout, stderr", ErrBadRequest)
	}
	if o.tty {
		o.stderr = false // the terminal carries both
	}
	return o, nil
}

// session is an upgraded remote command connection: its streams, how to
// report the outcome, and how to close it.
type session struct {
	streams Streams
	report  func(exitCode int, err error)
	close   func()
	// closed, when known, is closed when the client's connection ends.
	closed <-chan bool
}

// openSession upgrades the request over WebSocket (v5, v4 and the
// unversioned channel protocols) or SPDY, and returns nil when it could
// not (the client has been answered).
func (s *Server) openSession(w http.ResponseWriter, r *http.Request, o execOptions) *session {
	if wsstream.IsWebSocketRequest(r) {
		return s.openWebSocket(w, r, o)
	}
	return s.openSPDY(w, r, o)
}

func (s *Server) openWebSocket(w http.ResponseWriter, r *http.Request, o execOptions) *session {
	ch := func(on bool, t wsstream.ChannelType) wsstream.ChannelType {
		if on {
			return t
		}
		return wsstream.IgnoreChannel
	}
	channels := []wsstream.ChannelType{
		ch(o.stdin, wsstream.ReadChannel), ch(o.stdout, wsstream.WriteChannel), ch(o.stderr, wsstream.WriteChannel),
		wsstream.WriteChannel, // error
		ch(o.tty, wsstream.ReadChannel),
	}
	protocols := wsstream.NewDefaultChannelProtocols(channels)
	protocols[rc.StreamProtocolV4Name] = wsstream.ChannelProtocolConfig{Binary: true, Channels: channels}
	protocols["v4.base64.channel.k8s.io"] = wsstream.ChannelProtocolConfig{Binary: false, Channels: channels}
	protocols[rc.StreamProtocolV5Name] = wsstream.ChannelProtocolConfig{Binary: true, Channels: channels}
	conn := wsstream.NewConn(protocols)
	conn.SetIdleTimeout(StreamIdleTimeout)
	proto, rw, err := conn.Open(hijackClearingDeadlines(w), r)
	if err != nil {
		s.log.Debug("websocket upgrade failed", "path", r.URL.Path, "err", err)
		return nil
	}
	sess := &session{close: func() { conn.Close() }}
	if o.stdin {
		sess.streams.Stdin = rw[rc.StreamStdIn]
	}
	if o.stdout {
		sess.streams.Stdout = rw[rc.StreamStdOut]
	}
	if o.stderr {
		sess.streams.Stderr = rw[rc.StreamStdErr]
	}
	if o.tty {
		sess.streams.TTY = true
		sess.streams.Resize = readResizes(rw[rc.StreamResize])
	}
	sess.report = reporter(rw[rc.StreamErr], statusProtocols[proto])
	return sess
}

// spdyStream is a stream the client opened and the channel closed when
// the server's reply to it is sent.
type spdyStream struct {
	httpstream.Stream
	replySent <-chan struct{}
}

func (s *Server) openSPDY(w http.ResponseWriter, r *http.Request, o execOptions) *session {
	proto, err := httpstream.Handshake(r, w, spdyExecProtocols)
	if err != nil {
		return nil // Handshake answered
	}
	streamc := make(chan spdyStream)
	done := make(chan struct{})
	conn := spdy.NewResponseUpgrader().UpgradeResponse(hijackClearingDeadlines(w), r, func(st httpstream.Stream, replySent <-chan struct{}) error {
		select {
		case streamc <- spdyStream{st, replySent}:
			return nil
		case <-done:
			return errors.New("the session takes no more streams")
		}
	})
	if conn == nil {
		close(done)
		return nil // the upgrader answered
	}
	conn.SetIdleTimeout(StreamIdleTimeout)
	fail := func(err error) *session {
		close(done)
		s.log.Debug("remote command streams", "path", r.URL.Path, "err", err)
		conn.Close()
		return nil
	}
	want := 1 // error
	for _, b := range []bool{o.stdin, o.stdout, o.stderr, o.tty && proto != rc.StreamProtocolV2Name} {
		if b {
			want++
		}
	}
	got := map[string]spdyStream{}
	timeout := time.NewTimer(StreamCreationTimeout)
	defer timeout.Stop()
	for len(got) < want {
		select {
		case st := <-streamc:
			typ := st.Headers().Get(corev1.StreamType)
			switch typ {
			case corev1.StreamTypeError, corev1.StreamTypeStdin, corev1.StreamTypeStdout, corev1.StreamTypeStderr, corev1.StreamTypeResize:
			default:
				return fail(fmt.Errorf("unexpected stream type %q", typ))
			}
			got[typ] = st
		case <-timeout.C:
			return fail(fmt.Errorf("the client opened %d of %d streams within %s", len(got), want, StreamCreationTimeout))
		case <-conn.CloseChan():
			return fail(errors.New("the client left before opening its streams"))
		}
	}
	close(done)
	for _, st := range got {
		<-st.replySent
	}
	errStream, ok := got[corev1.StreamTypeError]
	if !ok {
		return fail(errors.New("the client opened no error stream"))
	}
	sess := &session{close: func() {
		for _, st := range got {
			st.Close()
		}
		conn.Close()
	}, closed: conn.CloseChan()}
	if st, ok := got[corev1.StreamTypeStdin]; ok {
		sess.streams.Stdin = st
	}
	if st, ok := got[corev1.StreamTypeStdout]; ok {
		sess.streams.Stdout = st
	}
	if st, ok := got[corev1.StreamTypeStderr]; ok {
		sess.streams.Stderr = st
	}
	sess.streams.TTY = o.tty
	if st, ok := got[corev1.StreamTypeResize]; ok {
		sess.streams.Resize = readResizes(st)
	}
	sess.report = reporter(errStream, statusProtocols[proto])
	return sess
}

// readResizes decodes the client's terminal sizes (one JSON object each)
// until the stream ends.
func readResizes(r io.Reader) <-chan TermSize {
	c := make(chan TermSize, 1)
	go func() {
		defer close(c)
		dec := json.NewDecoder(r)
		for {
			var sz struct{ Width, Height uint16 }
			if err := dec.Decode(&sz); err != nil {
				return
			}
			c <- TermSize(sz)
		}
	}()
	return c
}

// reporter writes a session's outcome on its error stream: with v4 and
// later a Status (Success, or NonZeroExitCode with the code as a cause,
// which kubectl prints as "command terminated with exit code N"); with
// older protocols the error's text, and nothing on success.
func reporter(w io.Writer, status bool) func(int, error) {
	return func(code int, err error) {
		if !status {
			switch {
			case err != nil:
				io.WriteString(w, err.Error())
			case code != 0:
				fmt.Fprintf(w, "command terminated with non-zero exit code: %d", code)
			}
			return
		}
		st := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess}
		switch {
		case err != nil:
			st.Status, st.Message = metav1.StatusFailure, err.Error()
			st.Reason, st.Code = metav1.StatusReasonInternalError, http.StatusInternalServerError
			if errors.Is(err, ErrNotFound) {
				st.Reason, st.Code = metav1.StatusReasonNotFound, http.StatusNotFound
			}
		case code != 0:
			st.Status, st.Reason = metav1.StatusFailure, rc.NonZeroExitCodeReason
			st.Message = fmt.Sprintf("command terminated with non-zero exit code: exit status %d", code)
			st.Details = &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: rc.ExitCodeCauseType, Message: strconv.Itoa(code)}}}
		}
		b, _ := json.Marshal(st)
		w.Write(b)
	}
}

// hijackClearingDeadlines lifts the server's read and write deadlines
// from a connection taken over for streaming: Hijack leaves them set,
// and the session may last hours.
func hijackClearingDeadlines(w http.ResponseWriter) http.ResponseWriter {
	return &deadlineFreeHijacker{ResponseWriter: w}
}

type deadlineFreeHijacker struct{ http.ResponseWriter }

func (d *deadlineFreeHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := d.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the connection cannot be taken over for streaming (HTTP/2?): use HTTP/1.1")
	}
	c, brw, err := h.Hijack()
	if err == nil {
		c.SetDeadline(time.Time{})
	}
	return c, brw, err
}

func (d *deadlineFreeHijacker) Flush() {
	if f, ok := d.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
