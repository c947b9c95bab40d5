package apiserver

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"flotilla.dev/flotilla/api/agentapi"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"flotilla.dev/flotilla/api"
)

// Admission sees every write a client asks for after it was authorized,
// defaulted and validated, and before it is stored. obj is the object to be
// stored (nil for a delete), old the stored one (nil for a create). It may
// change obj (a mutating step) and refuses a write by returning an error,
// best an apierrors.StatusError such as Forbidden. Writes the hub makes on
// its own (the namespace finalizer, bootstrap) do not pass through it.
type Admission interface {
	Admit(ctx context.Context, a Attributes, obj, old runtime.Object) error
}

// AuditEvent is one audited request: every mutating request and every
// refusal (401, 403, 429).
type AuditEvent struct {
	Time        time.Time
	User        *UserInfo // nil: unauthenticated
	SourceIP    string
	UserAgent   string
	Verb        string
	APIGroup    string
	Resource    string
	Subresource string
	Namespace   string
	Name        string
	// Path is set for non-resource requests.
	Path string
	Code int
	// Reason says why the request was refused, or which rule allowed it.
	Reason string
	// A streaming session (pods/exec, attach, portforward) is audited when
	// it starts and when it ends (Stage StageSessionStarted or
	// StageSessionEnded), with its container, command and node.
	Stage     string
	Container string
	Command   []string
	Node      string
}

// Auditor receives AuditEvents. Audit is called on the request's
// goroutine after the response was written; it must not block for long.
type Auditor interface {
	Audit(ev AuditEvent)
}

// Limits protect the hub from overload and from clients that keep failing.
type Limits struct {
	// MaxMutatingInFlight and MaxReadOnlyInFlight cap concurrent requests
	// (watches are long-running and not counted); past a cap the answer is
	// 429 with Retry-After. Administrators (system:masters) are never
	// turned away: the hub's own controllers are administrators, and an
	// operator must always be able to reach an overloaded hub. 0 means the
	// default (400 and 800), negative means no cap.
	MaxMutatingInFlight int
	MaxReadOnlyInFlight int
	// MaxHeartbeatsInFlight caps a pool of its own for the writes by
	// which devices say they are alive: their Leases in kube-node-lease
	// and their Nodes. A rollout's pod status writes fill the mutating
	// pool; were renewals refused with them, devices would be marked
	// unreachable and their taints and Ready reports be more writes.
	// 0 means the default (400), negative means no cap.
	MaxHeartbeatsInFlight int
	// QueueWait is how long a request with a certificate waits for a
	// slot when its pool (mutating, read-only, heartbeats) is full, as
	// many waiting at most as the pool holds, before it is answered 429;
	// kube-apiserver's priority levels queue too. A slow store commit
	// then delays requests instead of turning them away. 0 means the
	// default (2 s), negative means refuse at once.
	QueueWait time.Duration
	// Unauthenticated requests (per source IP) and refused requests (per
	// user) draw from a token bucket of FailureBurst tokens refilled at
	// FailureRate per second; an empty bucket is answered 429. This bounds
	// how fast join tokens or certificates can be guessed. 0 means the
	// default (10/s, burst 40), negative means no limit.
	FailureRate  float64
	FailureBurst int
	// UserRate and UserBurst bound the requests of each authenticated
	// client other than an administrator (a device, a viewer): a token
	// bucket of UserBurst refilled at UserRate per second, 429 with
	// Retry-After when empty (client-go waits and retries). A device
	// needs about one request a second, a few dozen when it reconnects.
	// 0 means the default (50/s, burst 200), negative means no limit.
	UserRate  float64
	UserBurst int

	// MaxPublicInFlight caps requests without a client certificate (joins,
	// GitOps webhooks) in a pool of their own, from their first body byte
	// to their answer: strangers never take the slots the fleet's
	// requests need. 0 means the default (64), negative means no cap.
	MaxPublicInFlight int
	// MaxPublicBodyBytes bounds the body of a request without a client
	// certificate (413 past it). 0 means the default (1 MiB: the largest
	// body a public handler takes, a Git webhook's).
	MaxPublicBodyBytes int
	// BodyTimeout is how long a client with a certificate has to send its
	// whole request body, PublicBodyTimeout the same for a client without
	// one; a slower body is answered 408. Clients with a certificate send
	// their body before their request takes its slot in flight, so slow
	// bodies never hold the slots. 0 means the defaults (60 s and 10 s).
	BodyTimeout       time.Duration
	PublicBodyTimeout time.Duration
	// MaxBodyBytesInFlight bounds the memory the bodies of requests by
	// clients other than administrators take at once, charged as the
	// bytes arrive; past it the answer is 429. 0 means the default
	// (256 MiB), negative means no bound.
	MaxBodyBytesInFlight int64
	// ResponseTimeout bounds how long the answer to a request may take
	// once its body is in, watches and pod logs (streams) excepted: a
	// client that stops reading its answer loses its connection. 0 means
	// the default (2 min).
	ResponseTimeout time.Duration
	// MinWatchTimeout shapes how long a watch lasts: the timeoutSeconds
	// the client asks for when it is not more than MinWatchTimeout;
	// otherwise (more, or none) a random duration between MinWatchTimeout
	// and twice it, so that a hub's watches do not all end together and
	// none lasts for ever. kube-apiserver's --min-request-timeout (1800 s)
	// is the same. 0 means the default (30 min).
	MinWatchTimeout time.Duration
	// MaxResourceVersionWaits caps the lists that wait at once for a
	// resourceVersion the hub has not reached yet (each waits at most
	// 3 s and holds no slot meanwhile); past it the answer is 429. 0
	// means the default (100), negative means no cap.
	MaxResourceVersionWaits int
}

// requestRecord travels with a request in its context: what the audit and
// the admission hook need to know about it.
type requestRecord struct {
	// user is who authenticated (UserFrom), and cert the client
	// certificate they did with. The user lives here rather than in a
	// context of its own: a request copied for one more context value is
	// kept as long as it runs, which for a watch is as long as its
	// device is connected.
	user          *UserInfo
	cert          *x509.Certificate
	attrs         Attributes
	fieldSelector string
	reason        string
	// slot is the request's place in flight (nil: it takes none).
	slot *slot
	// audited: the handler wrote the request's audit entries itself.
	audited bool
}

const recordKey ctxKey = 1

func withRecord(ctx context.Context, rr *requestRecord) context.Context {
	return context.WithValue(ctx, recordKey, rr)
}

func recordFrom(ctx context.Context) *requestRecord {
	rr, _ := ctx.Value(recordKey).(*requestRecord)
	return rr
}

// FieldSelectorFrom returns the fieldSelector of the request ctx belongs
// to, for authorizers that allow a list or watch only when it is narrowed
// (a device may list only the pods bound to it).
func FieldSelectorFrom(ctx context.Context) string {
	if rr := recordFrom(ctx); rr != nil {
		return rr.fieldSelector
	}
	return ""
}

// ClientCertificateFrom returns the verified client certificate the
// request ctx belongs to was authenticated with, or nil.
func ClientCertificateFrom(ctx context.Context) *x509.Certificate {
	if rr := recordFrom(ctx); rr != nil {
		return rr.cert
	}
	return nil
}

// SetAuditReason records why a request handled outside the REST paths
// (the join endpoint, say) was refused or allowed, for the audit log.
func SetAuditReason(ctx context.Context, reason string) {
	if rr := recordFrom(ctx); rr != nil {
		rr.reason = reason
	}
}

// admit runs the admission hook for a write made on behalf of a client.
func (s *Server) admit(ctx context.Context, obj, old runtime.Object) error {
	if s.cfg.Admission == nil {
		return nil
	}
	rr := recordFrom(ctx)
	if rr == nil || rr.user == nil {
		// The hub's own writes.
		return nil
	}
	if err := s.cfg.Admission.Admit(ctx, rr.attrs, obj, old); err != nil {
		rr.reason = err.Error()
		return err
	}
	return nil
}

func isMutating(verb string) bool {
	switch verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// startRequest attaches the request record; finishRequest audits.
func (s *Server) startRequest(r *http.Request) (*http.Request, *requestRecord) {
	rr := &requestRecord{fieldSelector: r.URL.Query().Get("fieldSelector")}
	return r.WithContext(withRecord(r.Context(), rr)), rr
}

func (s *Server) finishRequest(r *http.Request, rec *statusRecorder, rr *requestRecord, ri *requestInfo, isResource bool) {
	if s.cfg.Audit == nil || rr.audited {
		return
	}
	code := rec.code()
	ev := AuditEvent{Time: s.now().UTC(), User: rr.user, SourceIP: sourceIP(r), UserAgent: r.UserAgent(), Code: code, Reason: rr.reason}
	if isResource && ri.Resource != nil {
		ev.Verb, ev.APIGroup, ev.Resource = ri.Verb, ri.Resource.GVR.Group, ri.Resource.GVR.Resource
		ev.Subresource, ev.Namespace, ev.Name = ri.Subresource, ri.Namespace, ri.Name
	} else {
		ev.Verb, ev.Path = strings.ToLower(r.Method), r.URL.Path
	}
	mutating := isMutating(ev.Verb)
	if !isResource {
		mutating = r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodOptions &&
			r.URL.Path != agentapi.PathWatches // (watches, POSTed only for their body)
	}
	refused := code == http.StatusUnauthorized || code == http.StatusForbidden || code == http.StatusTooManyRequests
	if !mutating && !refused {
		return
	}
	s.cfg.Audit.Audit(ev)
}

func sourceIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// rateLimit refuses (429) a client that has spent its tokens for failed
// requests (per source IP without a certificate, per user with one), or an
// authenticated client other than an administrator that sends more
// requests than its own rate allows. Failures are charged when they are
// answered (chargeFailure): devices behind one NAT that join, and
// webhooks that succeed, spend nothing.
func (s *Server) rateLimit(w http.ResponseWriter, r *http.Request, rr *requestRecord) bool {
	user := rr.user
	if user != nil && slices.Contains(user.Groups, GroupAdmins) {
		return true
	}
	key := failureKey(r, rr)
	if wait, ok := s.limits.failures.take(key, 0); !ok {
		rr.reason = "rate limited: too many unauthenticated or refused requests from this client"
		s.writeError(w, r, apierrors.NewTooManyRequests("too many unauthenticated or refused requests from this client; retry later", retrySeconds(wait)), nil)
		return false
	}
	if user == nil {
		return true
	}
	if wait, ok := s.limits.requests.take(user.Name, 1); !ok {
		rr.reason = "rate limited: " + user.Name + " sends more requests than its share"
		s.writeError(w, r, apierrors.NewTooManyRequests(fmt.Sprintf("%s sends more than %g requests per second (burst %g); retry later",
			user.Name, s.limits.requests.rate, s.limits.requests.burst), retrySeconds(wait)), nil)
		return false
	}
	return true
}

func failureKey(r *http.Request, rr *requestRecord) string {
	if rr.user != nil {
		return "user:" + rr.user.Name
	}
	return "ip:" + sourceIP(r)
}

// takeSlot takes the request's place among the requests in flight:
// unauthenticated ones in the public pool, the others in the mutating or
// the read-only one. Administrators and watches (long-running) take none.
// It answers 429 when the pool is full and, for requests with a
// certificate, stays full for Limits.QueueWait.
func (s *Server) takeSlot(w http.ResponseWriter, r *http.Request, rr *requestRecord, ri *requestInfo, isResource bool) bool {
	user := rr.user
	if user != nil && slices.Contains(user.Groups, GroupAdmins) {
		return true
	}
	var sem *semaphore
	switch {
	case user == nil:
		sem = s.limits.public
	case isResource && ri.Verb == "watch", !isResource && r.URL.Path == agentapi.PathWatches:
		return true
	default:
		mutating := r.Method != http.MethodGet && r.Method != http.MethodHead
		if isResource {
			mutating = isMutating(ri.Verb)
		}
		sem = s.limits.readOnly
		switch {
		case mutating && isResource && heartbeat(user, ri):
			sem = s.limits.heartbeats
		case mutating:
			sem = s.limits.mutating
		}
	}
	if !sem.acquireWait(r.Context()) {
		msg := "the hub has too many requests in flight; retry later"
		if user == nil {
			msg = "the hub has too many requests without a client certificate (joins, webhooks) in flight; retry later"
		}
		rr.reason = "the hub has too many requests in flight"
		// Retried after 1 to 3 s, drawn for each answer: client-go waits
		// exactly what it is told, and a thousand requests refused in one
		// second must not all come back in the same one.
		s.writeError(w, r, apierrors.NewTooManyRequests(msg, 1+rand.IntN(3)), nil)
		return false
	}
	rr.slot = &slot{sem: sem, held: true}
	return true
}

// heartbeat says whether a device's write is one by which it says it is
// alive: its Lease in kube-node-lease or its Node (and the Node's
// status), as kube-apiserver's node-high priority level has them.
func heartbeat(user *UserInfo, ri *requestInfo) bool {
	if ri.Resource == nil || !slices.Contains(user.Groups, GroupNodes) {
		return false
	}
	gvr := ri.Resource.GVR
	switch {
	case gvr.Group == coordinationv1.GroupName && gvr.Resource == "leases":
		return ri.Namespace == api.NamespaceNodeLease
	case gvr.Group == "" && gvr.Resource == "nodes":
		return true
	}
	return false
}

// isLongRunning says whether a request streams its answer for as long as
// it likes: watches, pod logs and the streaming sessions
// (kube-apiserver's long-running requests that the hub serves).
func isLongRunning(ri *requestInfo, isResource bool) bool {
	if !isResource || ri.Resource == nil {
		return false
	}
	_, streaming := streamSubresources[ri.Subresource]
	return ri.Verb == "watch" || ri.Subresource == "log" || streaming
}

// setWriteDeadline bounds the writing of the answer to a request that is
// not long-running, and lifts the bound for one that is (an HTTP/1.1
// connection keeps the deadline its previous request had).
func (s *Server) setWriteDeadline(w http.ResponseWriter, longRunning bool) {
	var d time.Time
	if !longRunning {
		d = time.Now().Add(s.limits.responseTimeout)
	}
	_ = http.NewResponseController(w).SetWriteDeadline(d)
}

// readBodyFirst reads the request's body into memory under a deadline
// and a size limit, before the request takes a slot in flight, so that a
// client that sends its body slowly holds no slot. A body that is too
// slow is answered 408, one too large 413. The memory is charged to the
// bodies' budget until the request ends (release).
func (s *Server) readBodyFirst(w http.ResponseWriter, r *http.Request, rr *requestRecord) (release func(), ok bool) {
	release = func() {}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return release, true
	}
	public := rr.user == nil
	limit, timeout := int64(maxBodyBytes), s.limits.bodyTimeout
	what := fmt.Sprintf("request bodies are limited to %d bytes (and objects to %d bytes); send a smaller object", limit, api.MaxObjectSize)
	if public {
		limit, timeout = s.limits.publicMaxBody, s.limits.publicBodyTimeout
		what = fmt.Sprintf("the bodies of requests without a client certificate (joins, webhooks) are limited to %d bytes", limit)
	}
	budget := s.limits.bodies
	if public || slices.Contains(rr.user.Groups, GroupAdmins) {
		// Public requests are bounded by their pool, administrators not at all.
		budget = &byteBudget{limit: -1}
	}
	tooLarge := func() (func(), bool) {
		rr.reason = "the request body is too large"
		s.writeError(w, r, apierrors.NewRequestEntityTooLargeError(what), nil)
		return release, false
	}
	if r.ContentLength > limit {
		return tooLarge()
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(timeout))
	var charged int64
	release = func() { budget.refund(charged) }
	size := 512
	if r.ContentLength > 0 {
		size = int(r.ContentLength) + 1
	}
	buf := make([]byte, 0, min(size, 64<<10))
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		if grow := int64(cap(buf)) - charged; grow > 0 {
			if !budget.charge(grow) {
				rr.reason = "the hub is receiving too many request bodies at once"
				s.writeError(w, r, apierrors.NewTooManyRequests("the hub is receiving too many request bodies at once; retry later", 1), nil)
				return release, false
			}
			charged += grow
		}
		n, err := r.Body.Read(buf[len(buf):min(int64(cap(buf)), limit+1)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return tooLarge()
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if isTimeout(err) {
				rr.reason = "the request body was not received in time"
				s.writeError(w, r, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusRequestTimeout, Reason: metav1.StatusReasonTimeout,
					Message: fmt.Sprintf("the request body was not received within %v; the hub waits that long for a body, send it whole and at once", timeout)}}, nil)
				return release, false
			}
			s.writeError(w, r, badRequest("reading the request body: %v", err), nil)
			return release, false
		}
	}
	_ = rc.SetReadDeadline(time.Time{})
	r.Body = io.NopCloser(bytes.NewReader(buf))
	r.ContentLength = int64(len(buf))
	return release, true
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// chargeFailure makes a refused authenticated request cost its user a
// token, and a failed request without a certificate its source address,
// so that a client that keeps failing (guessing tokens, say) is slowed
// down.
func (s *Server) chargeFailure(r *http.Request, rr *requestRecord, code int) {
	if rr.user != nil && slices.Contains(rr.user.Groups, GroupAdmins) {
		return
	}
	switch {
	case code == http.StatusTooManyRequests:
		// Refused by a limit already: charging it again would only
		// lengthen the wait it was told.
	case rr.user != nil && (code == http.StatusForbidden || code == http.StatusUnauthorized):
		s.limits.failures.take(failureKey(r, rr), 1)
	case rr.user == nil && code >= 400:
		s.limits.failures.take(failureKey(r, rr), 1)
	}
}

func retrySeconds(d time.Duration) int {
	n := int((d + time.Second - 1) / time.Second)
	if n < 1 {
		n = 1
	}
	return n
}
