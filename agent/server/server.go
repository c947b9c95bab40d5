package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"flotilla.dev/flotilla/api/agentapi"
)

// DefaultListen is the server's address: agentapi.AgentPort on every
// interface.
var DefaultListen = net.JoinHostPort("", strconv.Itoa(agentapi.AgentPort))

// Defaults.
const (
	// DefaultPoll is how often a followed log is checked for new lines.
	DefaultPoll = 250 * time.Millisecond
	// GroupMasters is the group of the hub's admin identity, the only one
	// allowed by default.
	GroupMasters = "system:masters"
	// The HTTP server's bounds (see Config).
	DefaultReadTimeout  = 30 * time.Second
	DefaultWriteTimeout = 60 * time.Second
	DefaultIdleTimeout  = 90 * time.Second
	// readHeaderTimeout bounds the TLS handshake and the headers when
	// ReadTimeout is longer.
	readHeaderTimeout = 10 * time.Second
	// MaxHeaderBytes bounds a request's headers: the hub sends a few
	// hundred bytes.
	MaxHeaderBytes = 16 << 10
)

// Authorizer decides whether a verified client certificate may use the
// server; the error says why not.
type Authorizer func(cert *x509.Certificate) error

// AllowGroups allows certificates whose Organization (Kubernetes' group)
// is one of groups.
func AllowGroups(groups ...string) Authorizer {
	return func(c *x509.Certificate) error {
		for _, g := range c.Subject.Organization {
			if slices.Contains(groups, g) {
				return nil
			}
		}
		return fmt.Errorf("%q is in none of the groups %v", c.Subject.CommonName, groups)
	}
}

// Config is what the server is built from.
type Config struct {
	// Listen is the HTTPS address; DefaultListen when empty.
	Listen string
	// LogDir is where the runtime writes container logs (required).
	LogDir string
	// Certificate is the serving certificate (required).
	Certificate tls.Certificate
	// ClientCAs verify client certificates: the hub's CA (required).
	ClientCAs *x509.CertPool
	// Authorize decides on verified clients; AllowGroups(GroupMasters)
	// when nil.
	Authorize Authorizer
	// PodUID names a pod's current UID, when the caller knows it, to pick
	// its logs over those of an older pod of the same name.
	PodUID func(namespace, name string) (string, bool)
	// ContainerRunning says whether a container attempt may still write
	// its log; a follow ends when it says no. Optional.
	ContainerRunning func(ctx context.Context, ref LogRef) (bool, error)
	// Metrics, when set, is served on /metrics (to the hub only, like
	// everything but /healthz).
	Metrics http.Handler
	// Streamer runs /exec and /portForward sessions (/attach needs only
	// the logs); without it those paths are not served.
	Streamer Streamer
	// Poll is how often a followed log is checked; DefaultPoll when zero.
	Poll time.Duration
	// ReadTimeout bounds a request's headers and body (the agent's
	// requests have none), WriteTimeout the answer to a request other
	// than a log (logs stream for as long as they are followed), and
	// IdleTimeout a kept-alive connection without a request: a caller
	// cannot hold the agent's connections open for ever. Zero means the
	// defaults (DefaultReadTimeout, DefaultWriteTimeout,
	// DefaultIdleTimeout).
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	Log                                    *slog.Logger
}

// Server is the agent's HTTPS server.
type Server struct {
	cfg    Config
	log    *slog.Logger
	ln     net.Listener
	finder *logFinder
	mux    *http.ServeMux
}

// New checks cfg and listens; Run serves.
func New(cfg Config) (*Server, error) {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.LogDir == "" {
		return nil, errors.New("agent server: no log dir")
	}
	if len(cfg.Certificate.Certificate) == 0 {
		return nil, errors.New("agent server: no serving certificate")
	}
	if cfg.ClientCAs == nil {
		return nil, errors.New("agent server: no client CA: the agent needs the hub's CA to check that only the hub calls it")
	}
	if cfg.Authorize == nil {
		cfg.Authorize = AllowGroups(GroupMasters)
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("agent server: listening on %s: %w (set --server-listen)", cfg.Listen, err)
	}
	s := &Server{cfg: cfg, log: cfg.Log, ln: ln, finder: &logFinder{dir: cfg.LogDir, podUID: cfg.PodUID}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	mux.Handle("GET /containerLogs/{namespace}/{pod}/{container}", s.authenticated(http.HandlerFunc(s.serveLogs)))
	if cfg.Streamer != nil {
		// GET and POST, as the kubelet: kube-apiserver and the hub pass on
		// the client's method, and kubectl POSTs exec and attach.
		for _, m := range []string{"GET", "POST"} {
			mux.Handle(m+" /exec/{namespace}/{pod}/{container}", s.authenticated(http.HandlerFunc(s.serveExec)))
			mux.Handle(m+" /attach/{namespace}/{pod}/{container}", s.authenticated(http.HandlerFunc(s.serveAttach)))
			mux.Handle(m+" /portForward/{namespace}/{pod}", s.authenticated(http.HandlerFunc(s.servePortForward)))
		}
	}
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", s.authenticated(cfg.Metrics))
	}
	s.mux = mux
	return s, nil
}

// Close releases the listener of a server that is not run (Run closes
// it when it ends).
func (s *Server) Close() error { return s.ln.Close() }

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Handler serves the agent's API (without TLS, for tests of the handlers).
func (s *Server) Handler() http.Handler { return s.mux }

// TLSConfig is the server's TLS configuration: TLS 1.3, client
// certificates requested during the handshake and checked per request, so
// that a refused caller gets a 401 saying why rather than a TLS alert.
func (s *Server) TLSConfig() *tls.Config {
	cert := s.cfg.Certificate
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequestClientCert,
		NextProtos:   []string{"h2", "http/1.1"},
	}
}

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	// No WriteTimeout on the server: it would cut followed logs. Every
	// other answer gets its deadline from writeDeadlines.
	srv := &http.Server{
		Handler:           s.writeDeadlines(s.mux),
		TLSConfig:         s.TLSConfig(),
		ReadHeaderTimeout: min(readHeaderTimeout, s.cfg.ReadTimeout),
		ReadTimeout:       s.cfg.ReadTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(tls.NewListener(s.ln, srv.TLSConfig)) }()
	s.log.Info("agent server listening", "addr", s.ln.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("agent server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	return nil
}

// writeDeadlines bounds the writing of every answer but a log's (which
// streams), and lifts the bound for a log: an HTTP/1.1 connection keeps
// the deadline of its previous request.
func (s *Server) writeDeadlines(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var d time.Time
		if !isStreaming(r.URL.Path) {
			d = time.Now().Add(s.cfg.WriteTimeout)
		}
		_ = http.NewResponseController(w).SetWriteDeadline(d)
		next.ServeHTTP(w, r)
	})
}

// isStreaming says whether a path's answer streams for as long as the
// client likes: logs, and the sessions that take over the connection.
func isStreaming(path string) bool {
	for _, p := range []string{"/containerLogs/", "/exec/", "/attach/", "/portForward/"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// authenticated lets through requests whose client certificate chains to
// the hub CA, is meant for client authentication, and is authorized.
func (s *Server) authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "Unauthorized: the agent serves only the hub, which must present its client certificate", http.StatusUnauthorized)
			return
		}
		leaf := r.TLS.PeerCertificates[0]
		opts := x509.VerifyOptions{Roots: s.cfg.ClientCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Intermediates: x509.NewCertPool()}
		for _, c := range r.TLS.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		if _, err := leaf.Verify(opts); err != nil {
			http.Error(w, fmt.Sprintf("Unauthorized: client certificate %q: %v", leaf.Subject.CommonName, err), http.StatusUnauthorized)
			return
		}
		if err := s.cfg.Authorize(leaf); err != nil {
			http.Error(w, "Forbidden: "+err.Error(), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ParseLogOptions reads containerLogs' query parameters.
func ParseLogOptions(q map[string][]string) (LogOptions, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	opts := LogOptions{TailLines: -1}
	var err error
	for _, b := range []struct {
		name string
		dst  *bool
	}{{"follow", &opts.Follow}, {"previous", &opts.Previous}, {"timestamps", &opts.Timestamps}} {
		if v := get(b.name); v != "" {
			if *b.dst, err = strconv.ParseBool(v); err != nil {
				return opts, fmt.Errorf("%w: %s=%q is not true or false", ErrBadRequest, b.name, v)
			}
		}
	}
	if v := get("tailLines"); v != "" {
		if opts.TailLines, err = strconv.ParseInt(v, 10, 64); err != nil || opts.TailLines < 0 {
			return opts, fmt.Errorf("%w: tailLines=%q must be a number >= 0", ErrBadRequest, v)
		}
	}
	if v := get("limitBytes"); v != "" {
		if opts.LimitBytes, err = strconv.ParseInt(v, 10, 64); err != nil || opts.LimitBytes < 1 {
			return opts, fmt.Errorf("%w: limitBytes=%q must be a number >= 1", ErrBadRequest, v)
		}
	}
	if v := get("sinceTime"); v != "" {
		if opts.Since, err = time.Parse(time.RFC3339, v); err != nil {
			return opts, fmt.Errorf("%w: sinceTime=%q is not an RFC 3339 time", ErrBadRequest, v)
		}
	}
	if v := get("sinceSeconds"); v != "" {
		if !opts.Since.IsZero() {
			return opts, fmt.Errorf("%w: give sinceTime or sinceSeconds, not both", ErrBadRequest)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return opts, fmt.Errorf("%w: sinceSeconds=%q must be a number >= 1", ErrBadRequest, v)
		}
		opts.Since = time.Now().Add(-time.Duration(n) * time.Second)
	}
	return opts, nil
}

func (s *Server) serveLogs(w http.ResponseWriter, r *http.Request) {
	ns, pod, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	opts, err := ParseLogOptions(r.URL.Query())
	if err != nil {
		writeErr(w, err)
		return
	}
	ref, err := s.finder.find(ns, pod, container, opts.Previous)
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	fl := &follower{poll: s.cfg.Poll, running: s.cfg.ContainerRunning, idleChecks: 8}
	if f, ok := w.(http.Flusher); ok {
		fl.flush = f.Flush
	}
	if err := readLogs(r.Context(), w, ref, opts, fl); err != nil && r.Context().Err() == nil {
		s.log.Warn("serving logs failed", "pod", ns+"/"+pod, "container", container, "err", err)
	}
}

func writeErr(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrBadRequest):
		code = http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		code = http.StatusNotFound
	}
	msg := err.Error()
	msg = strings.TrimPrefix(msg, ErrBadRequest.Error()+": ")
	msg = strings.TrimPrefix(msg, ErrNotFound.Error()+": ")
	http.Error(w, msg, code)
}
