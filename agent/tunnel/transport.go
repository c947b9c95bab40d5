package tunnel

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/agent/join"
	"flotilla.dev/flotilla/api/agentapi"
)

// fallbackFor: how long a hub that serves no tunnels is sent requests
// over the base transport before it is asked again (it may be upgraded).
const fallbackFor = 10 * time.Minute

// maxBody bounds a request's body: it travels in one frame.
const maxBody = agentapi.MaxTunnelPayload - 64<<10

// ErrClosed is the error of a request whose tunnel broke before its
// answer was complete.
var ErrClosed = errors.New("tunnel to the hub closed")

// Transport sends requests through a tunnel to the hub.
type Transport struct {
	base http.RoundTripper
	log  *slog.Logger

	// h1 opens tunnels as base opens connections, over HTTP/1.1; nil
	// when base has no net/http transport under it to copy.
	h1 *http.Transport

	mu            sync.Mutex
	cur           *conn
	dialing       chan struct{} // closed when the tunnel being opened is (or is not)
	fallbackUntil time.Time
}

// New wraps base, the device's transport to its hub; log, when not nil,
// says when the hub serves no tunnels. Made last among rest.Config's
// wrappers, it copies base's net/http transport as they left it.
func New(base http.RoundTripper, log *slog.Logger) *Transport {
	t := &Transport{base: base, log: log}
	if nt := join.NetHTTPTransport(base); nt != nil {
		t.h1 = http1Transport(nt)
	}
	return t
}

// Wrap is New for rest.Config.Wrap.
func Wrap(log *slog.Logger) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper { return New(rt, log) }
}

// WrappedRoundTripper is the base transport (utilnet.RoundTripperWrapper),
// so that what configures the net/http transport under client-go's
// wrappers finds it through this one.
func (t *Transport) WrappedRoundTripper() http.RoundTripper { return t.base }

// RoundTrip sends req through the tunnel, opened when there is none.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" || req.Header.Get("Upgrade") != "" {
		// A tunnel is authenticated by its TLS client certificate;
		// upgrades (exec, port-forward) need a connection of their own.
		return t.base.RoundTrip(req)
	}
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(req.Body, maxBody+1))
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("reading the request's body: %w", err)
		}
		if len(b) > maxBody {
			return nil, fmt.Errorf("the request's body is larger than a tunnel carries (%d bytes)", maxBody)
		}
		body = b
	}
	wire, err := encode(req, body)
	if err != nil {
		return nil, err
	}
	// A tunnel that broke before the request went out is replaced once.
	for attempt := 0; ; attempt++ {
		c, resp, err := t.tunnel(req)
		if c == nil {
			if err == nil && resp == nil {
				if req.Body != nil && req.Body != http.NoBody {
					req = req.Clone(req.Context())
					req.Body = io.NopCloser(bytes.NewReader(body))
					req.ContentLength = int64(len(body))
				}
				return t.base.RoundTrip(req)
			}
			return resp, err
		}
		resp, err = c.roundTrip(req, wire)
		if errors.Is(err, errNotSent) && attempt == 0 {
			continue
		}
		return resp, err
	}
}

// encode puts req on the wire as HTTP/1.1 does, with body as its body.
func encode(req *http.Request, body []byte) ([]byte, error) {
	r := req.Clone(context.Background())
	r.Body, r.ContentLength, r.TransferEncoding = nil, int64(len(body)), nil
	if len(body) > 0 {
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	// (Only the tunnel's own hop could mean anything by them.)
	r.Header.Del("Connection")
	r.Header.Del("Keep-Alive")
	var b bytes.Buffer
	if err := r.Write(&b); err != nil {
		return nil, fmt.Errorf("encoding the request for the tunnel: %w", err)
	}
	return b.Bytes(), nil
}

// tunnel is the open tunnel, opened when there is none. Without one it
// returns what to answer instead: a response of the hub's (it is busy),
// an error, or neither when the request goes over the base transport.
func (t *Transport) tunnel(req *http.Request) (*conn, *http.Response, error) {
	for {
		t.mu.Lock()
		if t.cur != nil && !t.cur.isClosed() {
			c := t.cur
			t.mu.Unlock()
			return c, nil, nil
		}
		if t.h1 == nil || time.Now().Before(t.fallbackUntil) {
			t.mu.Unlock()
			return nil, nil, nil
		}
		if wait := t.dialing; wait != nil {
			t.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-req.Context().Done():
				return nil, nil, req.Context().Err()
			}
		}
		done := make(chan struct{})
		t.dialing = done
		t.mu.Unlock()

		c, resp, err := t.open(req)

		t.mu.Lock()
		t.dialing = nil
		if c != nil {
			t.cur = c
		}
		t.mu.Unlock()
		close(done)
		return c, resp, err
	}
}

// open asks the hub for a tunnel.
func (t *Transport) open(req *http.Request) (*conn, *http.Response, error) {
	u := *req.URL
	u.Path, u.RawPath, u.RawQuery, u.Fragment = agentapi.PathTunnel, "", "", ""
	// Not the request's context: the tunnel outlives it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stop := context.AfterFunc(req.Context(), cancel)
	defer stop()
	open, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, nil, err
	}
	open.Header.Set("Connection", "Upgrade")
	open.Header.Set("Upgrade", agentapi.TunnelProtocol)
	if ua := req.Header.Get("User-Agent"); ua != "" {
		open.Header.Set("User-Agent", ua)
	}
	resp, err := t.h1.RoundTrip(open)
	if err != nil {
		if req.Context().Err() != nil {
			return nil, nil, req.Context().Err()
		}
		return nil, nil, fmt.Errorf("opening a tunnel to the hub: %w", err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		rwc, ok := resp.Body.(io.ReadWriteCloser)
		if !ok {
			_ = resp.Body.Close()
			return nil, nil, fmt.Errorf("opening a tunnel to the hub: net/http gave a %T for the switched connection", resp.Body)
		}
		return newConn(rwc), nil, nil
	}
	if !servesNoTunnels(resp.StatusCode) {
		// A refusal (401, 403), a busy hub (429) or a failing one (5xx):
		// the request gets the hub's answer, with its Status and
		// Retry-After, as it would have over its own connection. Only an
		// answer saying the path or the upgrade is not served is a reason
		// to stop asking.
		resp.Request = req
		return nil, resp, nil
	}
	msg := hubMessage(resp.Body)
	_ = resp.Body.Close()
	t.mu.Lock()
	t.fallbackUntil = time.Now().Add(fallbackFor)
	t.mu.Unlock()
	if t.log != nil {
		t.log.Info("the hub serves no tunnels; sending requests over HTTP/2", "answer", resp.Status, "message", msg, "askAgainIn", fallbackFor)
	}
	return nil, nil, nil
}

// servesNoTunnels: the answer to a tunnel's upgrade says that this hub
// (or a proxy before it) does not serve them: a hub from before tunnels
// answers 404 for the path, a proxy that does not pass upgrades answers
// the request as a plain GET (2xx, 3xx) or refuses the method, the
// protocol or the upgrade (400, 405, 426, 501).
func servesNoTunnels(code int) bool {
	switch code {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed,
		http.StatusUpgradeRequired, http.StatusNotImplemented:
		return true
	}
	return code >= 200 && code < 400
}

// hubMessage is the message of the Status the hub answered with, or the
// start of whatever else it sent, for the log.
func hubMessage(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, 64<<10))
	var st metav1.Status
	if json.Unmarshal(b, &st) == nil && st.Message != "" {
		return st.Message
	}
	const most = 200
	if len(b) > most {
		b = b[:most]
	}
	return strings.TrimSpace(string(b))
}

// http1Transport opens tunnels as base opens connections (its TLS
// configuration and dialer), over HTTP/1.1: only HTTP/1.1 switches
// protocols.
func http1Transport(base *http.Transport) *http.Transport {
	h1 := base.Clone()
	h1.ForceAttemptHTTP2 = false
	h1.HTTP2 = nil
	h1.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	if h1.TLSClientConfig != nil {
		h1.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	// A refused tunnel's connection is not kept for requests that go
	// over the base transport.
	h1.DisableKeepAlives = true
	return h1
}

// parseHead reads an answer's status line and headers.
func parseHead(head []byte, req *http.Request) (*http.Response, error) {
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), req)
	if err != nil {
		return nil, fmt.Errorf("the hub's answer in the tunnel: %w", err)
	}
	// ReadResponse framed a body from the headers; the body comes in
	// frames instead.
	_ = resp.Body.Close()
	resp.TransferEncoding = nil
	resp.Close = false
	return resp, nil
}
