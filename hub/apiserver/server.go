package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"

	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/api/image"
	"flotilla.dev/flotilla/api/validation"
	"flotilla.dev/flotilla/hub/store"
)

// Config is what the API server is built from.
type Config struct {
	Store         store.Store
	Authenticator Authenticator
	Authorizer    Authorizer
	Log           *slog.Logger
	// Registry receives the server's metrics and is served on /metrics.
	Registry *prometheus.Registry
	// AllowTagImages admits images referenced by tag instead of digest.
	AllowTagImages bool
	// Images admits tags for the repositories it names (the agents read
	// the same policy from agent.yaml).
	Images image.Policy
	// WatchWindow is how many recent events a watch can resume from.
	WatchWindow int
	// WatcherBuffer is how many events a watcher may lag before it is closed.
	WatcherBuffer int
	// ServiceCIDR and the NodePort range for the service allocator.
	ServiceCIDR  string
	NodePortBase int
	NodePortSize int
	// Extra handlers mounted as they are (OpenAPI, webhooks, ...): path
	// prefix to handler. Prefixes ending in "/" match subtrees.
	Extra map[string]http.Handler
	// Public lists path prefixes served without authentication.
	Public []string
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Admission, Audit and Limits: see hooks.go. Admission and Audit may be nil.
	Admission Admission
	// BeforeDelete, when set, runs once as a deletion is carried out (its
	// preconditions hold, it is no dry run, the object is not already
	// being deleted), whoever asked for it; an error aborts the deletion.
	// The hub revokes a deleted Node's certificates there.
	BeforeDelete func(ctx context.Context, obj runtime.Object) error
	Audit        Auditor
	Limits       Limits
	// PodLogs fetches logs from agents for pods/log (see podlog.go).
	PodLogs PodLogsFunc
	// AgentConn reaches agents for pods/exec, attach and portforward
	// (see podexec.go).
	AgentConn AgentConnFunc
	// PodSecurity is the pod policy (Pod Security Standards by namespace,
	// see podsecurity.go); validation.DefaultPodSecurity() when nil.
	PodSecurity *validation.PodSecurity
	// EventTTL is how long after it last happened an Event is deleted
	// (kube-apiserver's --event-ttl); MaxEventBytesPerObject bounds the
	// Events about one object, the oldest going first. 0 means the
	// defaults (1 h, 256 KiB), negative means no limit.
	EventTTL               time.Duration
	MaxEventBytesPerObject int
	// TypeConverter types server-side apply and the managedFields of every
	// write (see TypeConverter); built from the hub's OpenAPI documents
	// when nil.
	TypeConverter managedfields.TypeConverter
}

// Server is the hub's API server.
type Server struct {
	cfg     Config
	log     *slog.Logger
	store   store.Store
	cache   *watchCache
	metrics *metrics
	alloc   *serviceAllocator
	now     func() time.Time
	ready   chan struct{}
	// nsQueue carries namespaces being deleted to the namespace finalizer.
	nsQueue chan string
	limits  *limiters
	fields  *fieldManagers
	tunnels tunnels
}

// maxBodyBytes bounds request bodies; objects are further bounded by
// api.MaxObjectSize.
const maxBodyBytes = 3 << 20

// New builds a server; Run must be running for it to answer reads.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("apiserver: a store is required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Authenticator == nil || cfg.Authorizer == nil {
		return nil, errors.New("apiserver: an authenticator and an authorizer are required")
	}
	if cfg.WatchWindow == 0 {
		cfg.WatchWindow = 50000
	}
	if cfg.WatcherBuffer == 0 {
		cfg.WatcherBuffer = 1000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.PodSecurity == nil {
		ps := validation.DefaultPodSecurity()
		cfg.PodSecurity = &ps
	}
	if err := cfg.PodSecurity.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Log, store: cfg.Store, now: cfg.Now, ready: make(chan struct{}), nsQueue: make(chan string, 1024)}
	s.tunnels.open = map[*tunnel]struct{}{}
	s.limits = newLimiters(cfg.Limits, cfg.Now)
	s.fields = newFieldManagers(cfg.TypeConverter)
	s.metrics = newMetrics(cfg.Registry, func() *watchCache { return s.cache }, s.tunnels.count)
	s.cache = newWatchCache(cfg.Log, cfg.Store, cfg.WatchWindow, cfg.WatcherBuffer, s.metrics)
	alloc, err := newServiceAllocator(cfg.ServiceCIDR, cfg.NodePortBase, cfg.NodePortSize)
	if err != nil {
		return nil, err
	}
	alloc.reserve = &reservations{st: cfg.Store, now: cfg.Now, log: cfg.Log}
	s.alloc = alloc
	return s, nil
}

// Run fills the watch cache, creates the namespaces every hub has, and
// serves the cache and the namespace finalizer until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.cache.Run(ctx) }()
	select {
	case <-s.cache.ready:
	case err := <-errc:
		return fmt.Errorf("watch cache: %w", err)
	case <-ctx.Done():
		return nil
	}
	if err := s.alloc.rebuild(ctx, s.cache); err != nil {
		return fmt.Errorf("service addresses: %w", err)
	}
	if err := s.bootstrap(ctx); err != nil {
		return err
	}
	close(s.ready)
	go s.runNamespaceFinalizer(ctx)
	go s.runEventExpiry(ctx)
	go s.recordUnreadable(ctx)
	s.log.Info("api server ready", "revision", s.cache.revision())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return nil
	}
}

// Ready is closed when the server can answer requests.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// errStarting answers a request to a hub still loading its cache: 503,
// retry in 1 to 4 seconds. A hub restarts with its whole fleet
// reconnecting; each client is given its own second to come back in
// (client-go waits as long as Retry-After says), so that they do not all
// come back together.
func errStarting() error { return errUnavailable("the hub is starting: its watch cache is loading") }

// errUnavailable is 503 with the Retry-After of errStarting.
func errUnavailable(msg string) error {
	err := apierrors.NewServiceUnavailable(msg)
	err.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(1 + rand.IntN(4))}
	return err
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A device's watch stream (serveWatches) waits on this goroutine's
	// stack for hours, under this frame: the request's state lives in q,
	// and admitting it, with its deep calls and large locals, returns
	// before it is served.
	q := &request{s: s, start: time.Now(), rec: &statusRecorder{ResponseWriter: w}}
	defer q.finish()
	if s.admitRequest(q, r) {
		q.serve()
	}
}

// request is one request as ServeHTTP serves it: what admitting it found
// and what finishing it must undo, in the order it must.
type request struct {
	s          *Server
	r          *http.Request
	rec        *statusRecorder
	rr         *requestRecord
	ri         requestInfo
	isResource bool
	start      time.Time
	// charged: a failure is charged to the client's failure budget.
	charged     bool
	releaseBody func()
}

// admitRequest takes a request through everything before serving it: health
// checks, authentication, rate limits, authorization, its body and its
// slot in flight. A request it does not admit (false) has been answered.
//
//go:noinline
func (s *Server) admitRequest(q *request, r *http.Request) bool {
	var perr error
	q.ri, q.isResource, perr = parseRequest(r)
	q.r, q.rr = s.startRequest(r)
	r, rec, rr, ri, isResource := q.r, q.rec, q.rr, &q.ri, q.isResource

	path := r.URL.Path
	switch path {
	case "/healthz", "/livez":
		_, _ = io.WriteString(rec, "ok")
		return false
	case "/readyz":
		select {
		case <-s.ready:
			_, _ = io.WriteString(rec, "ok")
		default:
			http.Error(rec, "not ready: the watch cache is loading", http.StatusServiceUnavailable)
		}
		return false
	}
	user, err := s.cfg.Authenticator.Authenticate(r)
	if errors.Is(err, ErrCannotAuthenticateYet) {
		// Not charged to the client: nothing is known to be wrong with it.
		rr.reason = err.Error()
		s.writeError(rec, r, errUnavailable(err.Error()), nil)
		return false
	}
	public := s.isPublic(path)
	if err == nil && user != nil {
		rr.user = user
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			rr.cert = r.TLS.PeerCertificates[0]
		}
	}
	// The multiplexed watches stream for as long as a watch does.
	longRunning := isLongRunning(ri, isResource) || path == agentapi.PathWatches || path == agentapi.PathTunnel
	s.setWriteDeadline(rec, longRunning)
	if !s.rateLimit(rec, r, rr) {
		return false
	}
	q.charged = true
	if (err != nil || user == nil) && !public {
		msg := "Unauthorized: this hub needs a client certificate signed by its CA (use the kubeconfig the hub wrote, or join with a token)"
		if err != nil {
			msg = "Unauthorized: " + err.Error()
		}
		rr.reason = msg
		s.writeError(rec, r, apierrors.NewUnauthorized(msg), nil)
		return false
	}
	if perr != nil {
		s.writeError(rec, r, perr, ri)
		return false
	}
	// Requests are authorized before their bodies are read, and bodies
	// are read before requests take their slots in flight: a refused
	// request costs no memory for its body, and a slow body holds no
	// slot. Requests without a certificate take a slot of their own pool
	// first, which bounds the memory their bodies take.
	if isResource {
		attrs := Attributes{User: user, Verb: ri.Verb, APIGroup: ri.Resource.GVR.Group, Resource: ri.Resource.GVR.Resource,
			Subresource: ri.Subresource, Namespace: ri.Namespace, Name: ri.Name}
		if ok := s.authorize(rec, r, attrs, ri); !ok {
			return false
		}
	} else if mri, ok, merr := metricsRequest(r); ok {
		// The metrics API is authorized as kube-apiserver does for
		// metrics-server: get and list of pods and nodes in metrics.k8s.io.
		if merr != nil {
			s.writeError(rec, r, merr, nil)
			return false
		}
		attrs := Attributes{User: user, Verb: mri.Verb, APIGroup: mri.Resource.GVR.Group, Resource: mri.Resource.GVR.Resource,
			Namespace: mri.Namespace, Name: mri.Name}
		if ok := s.authorize(rec, r, attrs, &mri); !ok {
			return false
		}
	} else if !public && path != agentapi.PathWatches && path != agentapi.PathTunnel {
		// (Each of the multiplexed watches, and each request of a
		// tunnel, is authorized as its own request.)
		if ok := s.authorize(rec, r, Attributes{User: user, Verb: strings.ToLower(r.Method), Path: path}, nil); !ok {
			return false
		}
	}
	if user == nil && !s.takeSlot(rec, r, rr, ri, isResource) {
		return false
	}
	releaseBody, ok := s.readBodyFirst(rec, r, rr)
	q.releaseBody = releaseBody
	if !ok {
		return false
	}
	s.setWriteDeadline(rec, longRunning)
	if user != nil && !s.takeSlot(rec, r, rr, ri, isResource) {
		return false
	}
	return true
}

// serve serves an admitted request.
func (q *request) serve() {
	s, r, rec := q.s, q.r, q.rec
	if !q.isResource {
		switch r.URL.Path {
		case agentapi.PathWatches:
			s.serveWatches(rec, r)
			return
		case agentapi.PathTunnel:
			s.serveTunnel(rec, r)
			return
		}
		s.serveNonResource(rec, r)
		return
	}
	select {
	case <-s.ready:
	default:
		s.writeError(rec, r, errStarting(), &q.ri)
		return
	}
	s.serveResource(rec, r, &q.ri)
}

// finish undoes what admitting the request took, last taken first, and
// records it: its metrics and its audit event.
//
//go:noinline
func (q *request) finish() {
	s, r, rec, rr := q.s, q.r, q.rec, q.rr
	if rr == nil {
		return // (admitRequest panicked before it began)
	}
	if q.releaseBody != nil {
		q.releaseBody()
	}
	rr.slot.release()
	if q.charged {
		s.chargeFailure(r, rr, rec.code())
	}
	if q.isResource && q.ri.Resource != nil {
		res := q.ri.Resource.GVR.Resource
		s.metrics.requests.WithLabelValues(q.ri.Verb, res, q.ri.Subresource, strconv.Itoa(rec.code())).Inc()
		if q.ri.Verb != "watch" {
			s.metrics.latency.WithLabelValues(q.ri.Verb, res).Observe(time.Since(q.start).Seconds())
		}
	}
	s.finishRequest(r, rec, rr, &q.ri, q.isResource)
}

func (s *Server) isPublic(path string) bool {
	if path == "/version" || path == "/version/" {
		return true
	}
	for _, p := range s.cfg.Public {
		if path == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(path, p)) {
			return true
		}
	}
	return false
}

func (s *Server) authorize(w http.ResponseWriter, r *http.Request, a Attributes, ri *requestInfo) bool {
	if rr := recordFrom(r.Context()); rr != nil {
		rr.attrs = a
	}
	ok, reason, err := s.cfg.Authorizer.Authorize(r.Context(), a)
	if rr := recordFrom(r.Context()); rr != nil {
		rr.reason = reason
	}
	if err != nil {
		s.writeError(w, r, apierrors.NewInternalError(fmt.Errorf("authorizing: %w", err)), ri)
		return false
	}
	if ok {
		return true
	}
	s.writeError(w, r, forbidden(a, ri, reason), ri)
	return false
}

// forbidden is the refusal of a, with the authorizer's reason.
func forbidden(a Attributes, ri *requestInfo, reason string) error {
	name := "unknown"
	if a.User != nil {
		name = a.User.Name
	}
	if ri != nil {
		return apierrors.NewForbidden(ri.Resource.GVR.GroupResource(), ri.Name,
			fmt.Errorf("user %q cannot %s resource %q%s in API group %q%s: %s", name, a.Verb, a.Resource, subSuffix(a.Subresource), a.APIGroup, nsSuffix(a.Namespace), reason))
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
		Message: fmt.Sprintf("forbidden: user %q cannot %s path %q: %s", name, a.Verb, a.Path, reason)}}
}

func subSuffix(s string) string {
	if s == "" {
		return ""
	}
	return "/" + s
}

func nsSuffix(ns string) string {
	if ns == "" {
		return ""
	}
	return " in the namespace " + strconv.Quote(ns)
}

func (s *Server) serveNonResource(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if path == "/metrics" {
		promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{}).ServeHTTP(w, r)
		return
	}
	for prefix, h := range s.cfg.Extra {
		if path == prefix || (strings.HasSuffix(prefix, "/") && strings.HasPrefix(path, prefix)) {
			h.ServeHTTP(w, r)
			return
		}
	}
	if s.serveDiscovery(w, r) || s.serveSelfReview(w, r) {
		return
	}
	if path == agentapi.PathUsage {
		if err := s.serveUsageReport(w, r); err != nil {
			s.writeError(w, r, err, nil)
		}
		return
	}
	if ri, ok, _ := metricsRequest(r); ok {
		if err := s.serveMetrics(w, r, &ri); err != nil {
			s.writeError(w, r, err, &ri)
		}
		return
	}
	s.writeError(w, r, notFoundPath(r), nil)
}

type ctxKey int

// UserFrom returns the authenticated user of a request context.
func UserFrom(ctx context.Context) *UserInfo {
	if rr := recordFrom(ctx); rr != nil {
		return rr.user
	}
	return nil
}

// statusRecorder remembers the response code for metrics and keeps
// http.Flusher working for watches.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *statusRecorder) code() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}
