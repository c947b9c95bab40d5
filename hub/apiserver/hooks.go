package apiserver

import (
	"context"
	"crypto/x509"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
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
	// Unauthenticated requests (per source IP) and refused requests (per
	// user) draw from a token bucket of FailureBurst tokens refilled at
	// FailureRate per second; an empty bucket is answered 429. This bounds
	// how fast join tokens or certificates can be guessed. 0 means the
	// default (10/s, burst 40), negative means no limit.
	FailureRate  float64
	FailureBurst int
}

// requestRecord travels with a request in its context: what the audit and
// the admission hook need to know about it.
type requestRecord struct {
	user          *UserInfo
	cert          *x509.Certificate
	attrs         Attributes
	fieldSelector string
	reason        string
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
	if s.cfg.Audit == nil {
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
		mutating = r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodOptions
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

// guard applies Limits. It returns false (having answered 429) when the
// request must not proceed; release must be called when it ends.
func (s *Server) guard(w http.ResponseWriter, r *http.Request, rr *requestRecord, ri *requestInfo, isResource bool) (release func(), ok bool) {
	release = func() {}
	user := rr.user
	if user != nil && slices.Contains(user.Groups, GroupAdmins) {
		return release, true
	}
	key := "ip:" + sourceIP(r)
	if user != nil {
		key = "user:" + user.Name
	}
	cost := 0.0
	if user == nil {
		cost = 1
	}
	if wait, ok := s.limits.failures.take(key, cost); !ok {
		rr.reason = "rate limited: too many unauthenticated or refused requests from this client"
		s.writeError(w, r, apierrors.NewTooManyRequests("too many unauthenticated or refused requests from this client; retry later", retrySeconds(wait)), nil)
		return release, false
	}
	if isResource && ri.Verb == "watch" {
		return release, true
	}
	mutating := r.Method != http.MethodGet && r.Method != http.MethodHead
	if isResource {
		mutating = isMutating(ri.Verb)
	}
	sem := s.limits.readOnly
	if mutating {
		sem = s.limits.mutating
	}
	if !sem.acquire() {
		rr.reason = "the hub has too many requests in flight"
		s.writeError(w, r, apierrors.NewTooManyRequests("the hub has too many requests in flight; retry later", 1), nil)
		return release, false
	}
	return sem.release, true
}

// chargeRefusal makes a refused authenticated request cost its user a
// token, so that a client that keeps being refused is slowed down.
func (s *Server) chargeRefusal(rr *requestRecord, code int) {
	if rr.user == nil || slices.Contains(rr.user.Groups, GroupAdmins) {
		return
	}
	if code == http.StatusForbidden || code == http.StatusUnauthorized {
		s.limits.failures.take("user:"+rr.user.Name, 1)
	}
}

func retrySeconds(d time.Duration) int {
	n := int((d + time.Second - 1) / time.Second)
	if n < 1 {
		n = 1
	}
	return n
}
