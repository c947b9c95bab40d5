package hub

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/image"
	"flotilla.dev/flotilla/api/validation"
	"flotilla.dev/flotilla/hub/apiserver"
	"flotilla.dev/flotilla/hub/apiserver/openapi"
	"flotilla.dev/flotilla/hub/audit"
	"flotilla.dev/flotilla/hub/auth"
	"flotilla.dev/flotilla/hub/join"
	"flotilla.dev/flotilla/hub/pki"
	"flotilla.dev/flotilla/hub/secrets"
	"flotilla.dev/flotilla/hub/store"
	"flotilla.dev/flotilla/hub/store/boltstore"
	"flotilla.dev/flotilla/hub/store/etcdstore"
	"flotilla.dev/flotilla/internal/run"
)

// Config is everything the hub is started with. Every field is also a
// config key, flag and FLOTILLA_ environment variable (see cmd/flotilla-hub).
type Config struct {
	// DataDir holds state.db (with the bbolt store), pki/ and
	// admin.kubeconfig.
	DataDir string
	// Store is "bbolt" (the default: DATA_DIR/state.db) or "etcd".
	Store string
	// Etcd configures the etcd store.
	Etcd EtcdConfig
	// Listen is the HTTPS address of the API.
	Listen string
	// TLSSANs are extra names and IPs for the serving certificate.
	TLSSANs []string
	// AllowTagImages admits images referenced by tag instead of digest.
	AllowTagImages bool
	// Images admits tags for some repositories only (--allow-tags).
	Images image.Policy
	// PodSecurityDefault is the Pod Security Standards level of namespaces
	// without the pod-security.kubernetes.io/enforce label
	// (--pod-security-default); baseline when empty. flotilla-system is
	// privileged unless labelled.
	PodSecurityDefault string
	// EventTTL is how long Events are kept after they last happened
	// (--event-ttl), MaxEventBytesPerObject how much the Events about one
	// object may hold; apiserver's defaults when zero.
	EventTTL               time.Duration
	MaxEventBytesPerObject int
	// NodeCertTTL is the lifetime of device certificates
	// (--node-cert-ttl); join.DefaultNodeCertTTL when zero.
	NodeCertTTL time.Duration
	// Profiling serves Go's profiles under /debug/pprof/ to admins
	// (--profiling, on by default as kube-apiserver's): what a hub under
	// load spends its CPU and memory on is then one `go tool pprof` away.
	Profiling bool
	// AdvertiseURL is the API URL written into kubeconfigs; derived from
	// Listen when empty.
	AdvertiseURL string
	// RunLoops starts the controllers, scheduler and GitOps sources inside
	// the hub; off only in tests of the API alone.
	RunLoops bool
	// Loops are started with the hub's admin client once the API is up.
	Loops []Loop
	// Public are handlers served without client authentication on the
	// API's listener, by path prefix (the GitOps webhook receiver, which
	// checks its own signatures).
	Public map[string]http.Handler
	// Limits protect the API from overload and from slow or hostile
	// clients; the zero value has the defaults (apiserver.Limits).
	Limits apiserver.Limits
	Log    *slog.Logger
}

// PathProfiles is where --profiling serves Go's profiles (net/http/pprof:
// /debug/pprof/heap, /debug/pprof/profile?seconds=30, ...).
const PathProfiles = "/debug/pprof/"

// Store kinds.
const (
	StoreBolt = "bbolt"
	StoreEtcd = "etcd"
)

// EtcdConfig says how to reach etcd (--etcd-* flags).
type EtcdConfig struct {
	// Endpoints are the client URLs of the etcd members.
	Endpoints []string
	// CAFile verifies etcd's serving certificates; CertFile and KeyFile
	// are the hub's client certificate, when etcd asks for one.
	CAFile, CertFile, KeyFile string
	// Prefix is the key prefix; etcdstore.DefaultPrefix when empty. Hubs
	// that serve one fleet use the same prefix.
	Prefix string
}

// The API's HTTP server.
const (
	// ReadHeaderTimeout bounds the TLS handshake and a request's headers.
	ReadHeaderTimeout = 10 * time.Second
	// ReadTimeout bounds a request's headers and body together; the API
	// sets shorter deadlines on bodies (apiserver.Limits' BodyTimeout and
	// PublicBodyTimeout) and lifts this one once a body is in, so that it
	// never cuts a stream.
	ReadTimeout = 2 * time.Minute
	// IdleTimeout closes a keep-alive connection with no request for
	// this long (kube-apiserver's 90 s).
	IdleTimeout = 90 * time.Second
	// MaxHeaderBytes bounds a request's headers. Clients authenticate
	// with certificates, not headers: kubectl, client-go and the agents
	// send a few hundred bytes, webhooks a few KiB.
	MaxHeaderBytes = 64 << 10
)

// HTTP/2. Every device keeps one connection to the hub for as long as it
// runs, so what the server keeps per connection is multiplied by the
// fleet; these bound the two parts of it that Go sizes for browsers.
const (
	// HeaderTableSize bounds the HPACK table (RFC 7541) in which the hub
	// encodes its answers to 1 KiB instead of 4 KiB. It still holds what
	// the hub repeats in every answer (content type, status, date), and
	// the encoder announces the smaller size itself, in its first block.
	//
	// The table decoding requests keeps HTTP/2's initial 4 KiB: a client
	// encodes its first requests on a new connection for that size, before
	// it has read the hub's SETTINGS. Announcing less made Go's server
	// decode them with the smaller table from the start, and a restarted
	// hub, meeting clients that open many watches at once, closed their
	// connections with COMPRESSION_ERROR (RFC 9113 6.5.2 warns that a
	// smaller table is not interoperable).
	HeaderTableSize = 1 << 10
	// MaxReadFrameSize is the largest frame a client may send: HTTP/2's
	// own default of 16 KiB instead of Go's 1 MiB. The server keeps a
	// read buffer as large as the largest frame a connection has sent
	// for the rest of its life; bigger bodies come in more frames.
	MaxReadFrameSize = 16 << 10
)

// Loop is a long-running part that works through the hub's own API.
type Loop struct {
	Name string
	Run  func(ctx context.Context, cfg *rest.Config) error
}

// Hub is a running hub.
type Hub struct {
	cfg      Config
	log      *slog.Logger
	store    store.Store
	pki      *pki.PKI
	api      *apiserver.Server
	listener net.Listener
	url      string
	audit    *audit.Log
	graph    *auth.Graph
	// revocations are the users whose certificates are refused.
	revocations *auth.Revocations
}

// New opens the data dir and prepares the hub; Run serves it.
func New(cfg Config) (*Hub, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.DataDir == "" {
		return nil, errors.New("hub: a data dir is required (--data-dir)")
	}
	if cfg.NodeCertTTL < 0 {
		return nil, fmt.Errorf("hub: --node-cert-ttl %s: give a positive lifetime such as 168h", cfg.NodeCertTTL)
	}
	if err := cfg.Images.Validate(); err != nil {
		return nil, fmt.Errorf("hub: --allow-tags: %w", err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the data dir %s: %w", cfg.DataDir, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	st, err := openStore(cfg, reg)
	if err != nil {
		return nil, err
	}
	p, err := pki.LoadOrCreate(filepath.Join(cfg.DataDir, "pki"), pki.Options{SANs: cfg.TLSSANs, Logger: cfg.Log})
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("loading the hub's PKI: %w", err)
	}
	for _, resumed := range []bool{false, true} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "flotilla_hub_tls_handshakes_total",
			Help:        "TLS handshakes of the hub's API: full ones, and those that resumed a session (resumed=\"true\").",
			ConstLabels: prometheus.Labels{"resumed": strconv.FormatBool(resumed)},
		}, func() float64 {
			full, res := p.Handshakes()
			if resumed {
				return float64(res)
			}
			return float64(full)
		}))
	}
	oapi, err := openapi.New(api.Resources())
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("building the OpenAPI documents: %w", err)
	}
	tc, err := apiserver.TypeConverter(oapi)
	if err != nil {
		st.Close()
		return nil, err
	}
	sec, auditLog, err := openSecurity(cfg, st)
	if err != nil {
		st.Close()
		return nil, err
	}
	graph := auth.NewGraph()
	revs := auth.NewRevocations()
	revs.Log = cfg.Log
	revoker := &auth.NodeRevoker{}
	joiner := &join.Handler{CA: p, NodeCertTTL: cfg.NodeCertTTL, Log: cfg.Log}
	extra := oapi.Handlers()
	for path, hd := range joiner.Handlers() {
		extra[path] = hd
	}
	if cfg.Profiling {
		extra[PathProfiles] = profiles()
	}
	public := append([]string(nil), join.PublicPaths...)
	for prefix, hd := range cfg.Public {
		extra[prefix], public = hd, append(public, prefix)
	}
	srv, err := apiserver.New(apiserver.Config{
		Extra:                  extra,
		Public:                 public,
		Store:                  sec,
		Authenticator:          apiserver.CertAuthenticator{Verify: verifyClient(p, revs)},
		BeforeDelete:           revoker.BeforeDelete,
		Authorizer:             &auth.Authorizer{Nodes: auth.NewNodeAuthorizer(graph)},
		Admission:              auth.NodeRestriction{},
		Audit:                  auditLog,
		Log:                    cfg.Log,
		Registry:               reg,
		AllowTagImages:         cfg.AllowTagImages,
		Images:                 cfg.Images,
		PodSecurity:            podSecurity(cfg.PodSecurityDefault),
		PodLogs:                apiserver.AgentPodLogs(p.AdminCredentials),
		AgentConn:              apiserver.AgentConn(p.AdminCredentials),
		Limits:                 cfg.Limits,
		EventTTL:               cfg.EventTTL,
		MaxEventBytesPerObject: cfg.MaxEventBytesPerObject,
		TypeConverter:          tc,
	})
	if err != nil {
		auditLog.Close()
		st.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		auditLog.Close()
		st.Close()
		return nil, fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	h := &Hub{cfg: cfg, log: cfg.Log, store: st, pki: p, api: srv, listener: ln, audit: auditLog, graph: graph, revocations: revs}
	h.url = cfg.AdvertiseURL
	if h.url == "" {
		h.url = "https://" + advertiseHost(ln.Addr().(*net.TCPAddr))
	}
	if err := p.WriteAdminKubeconfig(h.KubeconfigPath(), h.url); err != nil {
		ln.Close()
		auditLog.Close()
		st.Close()
		return nil, fmt.Errorf("writing the admin kubeconfig: %w", err)
	}
	// The join endpoint records tokens and Nodes, and the revoker
	// revocations, through the API.
	admin, err := kubernetes.NewForConfig(h.AdminConfig())
	if err != nil {
		ln.Close()
		auditLog.Close()
		st.Close()
		return nil, fmt.Errorf("join endpoint client: %w", err)
	}
	joiner.Client, revoker.Client = admin, admin
	return h, nil
}

// verifyClient accepts a client certificate that chains to the hub's CA,
// is in date and was not revoked. The hub's own admin identity is never
// revoked: the revocation list itself is read with it.
func verifyClient(p *pki.PKI, revs *auth.Revocations) func(*x509.Certificate, []*x509.Certificate) error {
	return func(cert *x509.Certificate, intermediates []*x509.Certificate) error {
		if err := p.VerifyClient(cert, intermediates); err != nil {
			return err
		}
		if cert.Subject.CommonName == pki.AdminUser {
			return nil
		}
		err := revs.Check(cert.Subject.CommonName, pki.IssuedAt(cert))
		if errors.Is(err, auth.ErrRevocationsLoading) {
			return fmt.Errorf("%w: %w", apiserver.ErrCannotAuthenticateYet, err)
		}
		return err
	}
}

// podSecurity is the hub's pod policy with the configured default level.
func podSecurity(level string) *validation.PodSecurity {
	ps := validation.DefaultPodSecurity()
	if level != "" {
		ps.Default = level
	}
	return &ps
}

// openStore opens the configured store.
func openStore(cfg Config, reg prometheus.Registerer) (store.Store, error) {
	switch cfg.Store {
	case "", StoreBolt:
		st, err := boltstore.Open(filepath.Join(cfg.DataDir, "state.db"), boltstore.Options{Registerer: reg, Logger: cfg.Log})
		if err != nil {
			return nil, fmt.Errorf("opening the store: %w", err)
		}
		return st, nil
	case StoreEtcd:
		tlsCfg, err := cfg.Etcd.TLSConfig()
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: cfg.Etcd.Endpoints, TLS: tlsCfg, Prefix: cfg.Etcd.Prefix})
		if err != nil {
			return nil, fmt.Errorf("opening the store: %w", err)
		}
		return st, nil
	}
	return nil, fmt.Errorf("hub: --store %q: want %s (the default, DATA_DIR/state.db) or %s (with --etcd-endpoints)", cfg.Store, StoreBolt, StoreEtcd)
}

// TLSConfig builds the etcd client's TLS settings from the files; nil
// when no file is given and no endpoint is https://.
func (e EtcdConfig) TLSConfig() (*tls.Config, error) {
	if e.CAFile == "" && e.CertFile == "" && e.KeyFile == "" {
		for _, ep := range e.Endpoints {
			if strings.HasPrefix(ep, "https://") {
				return &tls.Config{MinVersion: tls.VersionTLS12}, nil
			}
		}
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if e.CAFile != "" {
		pem, err := os.ReadFile(e.CAFile)
		if err != nil {
			return nil, fmt.Errorf("hub: --etcd-cafile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("hub: --etcd-cafile %s holds no PEM certificate", e.CAFile)
		}
		c.RootCAs = pool
	}
	if (e.CertFile == "") != (e.KeyFile == "") {
		return nil, errors.New("hub: --etcd-certfile and --etcd-keyfile go together: give both, or neither")
	}
	if e.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(e.CertFile, e.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("hub: --etcd-certfile/--etcd-keyfile: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// openSecurity wraps the store so Secrets are encrypted at rest (key in
// DATA_DIR/pki/secrets.key) and opens the audit log.
func openSecurity(cfg Config, st store.Store) (*secrets.Store, *audit.Log, error) {
	keyFile := filepath.Join(cfg.DataDir, "pki", secrets.KeyFile)
	key, err := secrets.LoadOrCreateKey(keyFile)
	if err != nil {
		return nil, nil, err
	}
	sec, err := secrets.Wrap(st, key)
	if err != nil {
		return nil, nil, err
	}
	sec.KeyFile = keyFile // named in the errors about Secrets it cannot open
	if n, err := sec.EncryptExisting(context.Background()); err != nil {
		return nil, nil, err
	} else if n > 0 {
		cfg.Log.Info("encrypted Secrets stored in plaintext", "count", n)
	}
	auditLog, err := audit.Open(filepath.Join(cfg.DataDir, audit.FileName), audit.Options{Logger: cfg.Log})
	if err != nil {
		return nil, nil, err
	}
	return sec, auditLog, nil
}

func advertiseHost(a *net.TCPAddr) string {
	ip := a.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(a.Port))
}

// URL is the API's address as written into kubeconfigs.
func (h *Hub) URL() string { return h.url }

// Addr is the address the API listens on.
func (h *Hub) Addr() net.Addr { return h.listener.Addr() }

// KubeconfigPath is where the admin kubeconfig is written.
func (h *Hub) KubeconfigPath() string { return filepath.Join(h.cfg.DataDir, "admin.kubeconfig") }

// AdminConfig is a client config with the admin's credentials.
func (h *Hub) AdminConfig() *rest.Config {
	cert, key := h.pki.AdminCredentials()
	return &rest.Config{
		Host:            h.url,
		TLSClientConfig: rest.TLSClientConfig{CAData: h.pki.CACertPEM(), CertData: cert, KeyData: key},
		QPS:             1000,
		Burst:           2000,
	}
}

// PKI gives the hub's certificate authority (for issuing identities).
func (h *Hub) PKI() *pki.PKI { return h.pki }

// Run serves until ctx ends, then shuts down in order: the loops, the HTTP
// server, then the store (pending writes finish).
func (h *Hub) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer h.store.Close()
	defer h.audit.Close()

	tlsCfg := h.pki.ServerTLSConfig()
	tlsCfg.NextProtos = []string{"h2", "http/1.1"}
	// No WriteTimeout: watches and pod logs stream for as long as they
	// last. The API sets a deadline on every other answer, and on every
	// body (apiserver.Limits); ReadTimeout only bounds a request no
	// handler reads the body of.
	httpSrv := &http.Server{
		Handler:           h.api,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(h.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return ctx },
		HTTP2: &http.HTTP2Config{
			MaxEncoderHeaderTableSize: HeaderTableSize,
			MaxReadFrameSize:          MaxReadFrameSize,
		},
	}
	// Device tunnels are hijacked connections, which Shutdown does not
	// close by itself.
	httpSrv.RegisterOnShutdown(h.api.CloseTunnels)
	// The node authorizer and the loops work through the API: they start
	// once it is ready.
	afterReady := func(f func(ctx context.Context) error) func(context.Context) error {
		return func(ctx context.Context) error {
			select {
			case <-h.api.Ready():
				return f(ctx)
			case <-ctx.Done():
				return nil
			}
		}
	}
	loops := []run.Loop{
		{Name: "api server", Run: h.api.Run},
		{Name: "pki", Run: h.pki.Run},
		{Name: "serving HTTPS", Run: func(ctx context.Context) error {
			return serve(ctx, httpSrv, tls.NewListener(h.listener, tlsCfg))
		}},
		{Name: "node authorizer", Run: afterReady(func(ctx context.Context) error { return h.graph.Run(ctx, h.AdminConfig()) })},
		{Name: "revocations", Run: afterReady(func(ctx context.Context) error { return h.revocations.Run(ctx, h.AdminConfig()) })},
	}
	if es, ok := h.store.(*etcdstore.Store); ok {
		// bbolt compacts its own history; etcd keeps all of it unless told.
		loops = append(loops, run.Loop{Name: "etcd compaction", Run: func(ctx context.Context) error {
			return es.RunCompaction(ctx, etcdstore.DefaultCompactionInterval, h.log.Warn)
		}})
	}
	if h.cfg.RunLoops {
		for _, l := range h.cfg.Loops {
			loops = append(loops, run.Loop{Name: l.Name, Run: afterReady(func(ctx context.Context) error { return l.Run(ctx, h.AdminConfig()) })})
		}
	}
	h.log.Info("hub serving", "url", h.url, "kubeconfig", h.KubeconfigPath(), "dataDir", h.cfg.DataDir)
	// The first error also ends the requests in flight (ctx is their
	// base context) while the loops stop.
	err := run.Group{Loops: loops, OnError: func(error) { cancel() }}.Run(ctx)
	// Already shut down unless serving failed by itself.
	shutdown(httpSrv)
	return err
}

// serve serves s on ln until ctx ends, then shuts it down.
func serve(ctx context.Context, s *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ln) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
		shutdown(s)
		<-errc
		return nil
	}
}

func shutdown(s *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		_ = s.Close()
	}
}

// profiles serves net/http/pprof's pages on a mux of their own: the
// package also registers them on http.DefaultServeMux, which the hub never
// serves.
func profiles() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(PathProfiles, pprof.Index)
	mux.HandleFunc(PathProfiles+"cmdline", pprof.Cmdline)
	mux.HandleFunc(PathProfiles+"profile", pprof.Profile)
	mux.HandleFunc(PathProfiles+"symbol", pprof.Symbol)
	mux.HandleFunc(PathProfiles+"trace", pprof.Trace)
	return mux
}
