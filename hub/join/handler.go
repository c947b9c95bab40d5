package join

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/apiserver"
	"flotilla.dev/flotilla/hub/auth"
	"flotilla.dev/flotilla/hub/pki"
)

// PathUser is where an admin has a certificate signed for a person; the
// device paths are agentapi's (PathCA, PathCSR, PathRenew).
const PathUser = agentapi.PathPrefix + "user"

// PublicPaths are the paths served without authentication. The renewal
// path checks the device's certificate itself, so that a device back
// after its certificate expired can still renew with it (see renew).
var PublicPaths = []string{agentapi.PathCA, agentapi.PathCSR, agentapi.PathRenew}

// Defaults.
const (
	// DefaultNodeCertTTL is short, so that a key a device has rotated
	// away, or a certificate whose revocation was undone by mistake, is
	// soon worthless; devices renew online at 70% of it.
	DefaultNodeCertTTL = 7 * 24 * time.Hour
	// DefaultExpiredRenewal is how long after its certificate expired a
	// device may still renew with it, if its key is still the one its
	// Node records and it was not revoked: a device offline for weeks
	// comes back without a new token.
	DefaultExpiredRenewal = 180 * 24 * time.Hour
	DefaultUserCertTTL    = 365 * 24 * time.Hour
	maxRequestBytes       = 64 << 10
)

// CA is what the handler needs of the hub's PKI.
type CA interface {
	CACertPEM() []byte
	SignCSR(csrPEM []byte, commonName string, groups []string, ttl time.Duration) ([]byte, error)
	VerifyExpiredClient(cert *x509.Certificate, intermediates []*x509.Certificate, maxExpired time.Duration) error
}

var _ CA = (*pki.PKI)(nil)

// UserRequest is POSTed to PathUser by an admin; the answer is an
// agentapi.CertificateResponse.
type UserRequest struct {
	User string `json:"user"`
	Role string `json:"role"`
	CSR  string `json:"csr"`
	// TTL is a Go duration ("8760h"); empty means a year.
	TTL string `json:"ttl,omitempty"`
}

// Handler serves the join paths.
type Handler struct {
	CA CA
	// Client reaches the hub's API as its admin.
	Client      kubernetes.Interface
	NodeCertTTL time.Duration
	// ExpiredRenewal is DefaultExpiredRenewal when zero.
	ExpiredRenewal time.Duration
	Now            func() time.Time
	Log            *slog.Logger
}

func (h *Handler) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

func (h *Handler) log() *slog.Logger {
	if h.Log != nil {
		return h.Log
	}
	return slog.Default()
}

// Handlers returns the handler for apiserver.Config.Extra.
func (h *Handler) Handlers() map[string]http.Handler {
	return map[string]http.Handler{agentapi.PathPrefix: h}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var err error
	switch {
	case r.URL.Path == agentapi.PathCA && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		w.Header().Set("Content-Type", "application/x-pem-file")
		_, _ = w.Write(h.CA.CACertPEM())
		return
	case r.URL.Path == agentapi.PathCSR && r.Method == http.MethodPost:
		err = h.join(w, r)
	case r.URL.Path == agentapi.PathRenew && r.Method == http.MethodPost:
		err = h.renew(w, r)
	case r.URL.Path == PathUser && r.Method == http.MethodPost:
		err = h.user(w, r)
	case r.URL.Path == agentapi.PathCA || r.URL.Path == agentapi.PathCSR || r.URL.Path == agentapi.PathRenew || r.URL.Path == PathUser:
		err = &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusMethodNotAllowed,
			Reason: metav1.StatusReasonMethodNotAllowed, Message: fmt.Sprintf("%s does not accept %s", r.URL.Path, r.Method)}}
	default:
		err = apierrors.NewNotFound(corev1.Resource("path"), r.URL.Path)
	}
	if err != nil {
		writeStatus(w, r, err)
	}
}

func writeStatus(w http.ResponseWriter, r *http.Request, err error) {
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		se = apierrors.NewInternalError(err)
	}
	st := se.Status()
	st.Kind, st.APIVersion = "Status", "v1"
	apiserver.SetAuditReason(r.Context(), st.Message)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(&st)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func decode(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes+1))
	if err != nil {
		return apierrors.NewBadRequest("reading the request: " + err.Error())
	}
	if len(body) > maxRequestBytes {
		return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("join requests are limited to %d bytes", maxRequestBytes))
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("the request body is not a valid %T: %v", v, err))
	}
	return nil
}

// csrKey parses a CSR far enough to learn its key's fingerprint; SignCSR
// checks the rest.
func csrKey(csrPEM string) (string, error) {
	block, _ := pem.Decode([]byte(csrPEM))
	if block == nil {
		return "", apierrors.NewBadRequest("csr: no PEM certificate request found")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return "", apierrors.NewBadRequest("csr: " + err.Error())
	}
	return auth.KeyFingerprint(csr.RawSubjectPublicKeyInfo), nil
}

func (h *Handler) sign(csrPEM, cn string, groups []string, ttl time.Duration) ([]byte, error) {
	cert, err := h.CA.SignCSR([]byte(csrPEM), cn, groups, ttl)
	if errors.Is(err, pki.ErrInvalidCSR) {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	return cert, err
}

func (h *Handler) nodeTTL() time.Duration {
	if h.NodeCertTTL > 0 {
		return h.NodeCertTTL
	}
	return DefaultNodeCertTTL
}

func unauthorized(format string, args ...any) error {
	return apierrors.NewUnauthorized(fmt.Sprintf(format, args...))
}

var nodesGR = corev1.Resource("nodes")

// join turns a token and a CSR into a node certificate.
func (h *Handler) join(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	var req agentapi.JoinRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	tok, err := ParseToken(req.Token)
	if err != nil {
		return apierrors.NewBadRequest("token: " + err.Error())
	}
	if errs := validation.IsDNS1123Subdomain(req.NodeName); len(errs) > 0 {
		return apierrors.NewBadRequest(fmt.Sprintf("nodeName %q is not a valid node name: %s", req.NodeName, strings.Join(errs, "; ")))
	}
	fp, err := csrKey(req.CSR)
	if err != nil {
		return err
	}
	apiserver.SetAuditReason(ctx, fmt.Sprintf("join of node %s with token %s", req.NodeName, tok.ID))
	ti, err := h.checkToken(ctx, tok)
	if err != nil {
		return err
	}
	if err := h.checkNodeKey(ctx, req.NodeName, fp); err != nil {
		return err
	}
	if err := h.waitPastRevocation(ctx, auth.NodePrefix+req.NodeName); err != nil {
		return err
	}
	cert, err := h.sign(req.CSR, auth.NodePrefix+req.NodeName, []string{auth.GroupNodes}, h.nodeTTL())
	if err != nil {
		return err
	}
	if err := h.useToken(ctx, tok); err != nil {
		return err
	}
	if err := h.recordNode(ctx, req.NodeName, fp, ti.Labels); err != nil {
		return err
	}
	h.log().Info("device joined", "node", req.NodeName, "token", tok.ID, "key", fp, "labels", ti.Labels)
	apiserver.SetAuditReason(ctx, fmt.Sprintf("joined: node %s with token %s, key %s", req.NodeName, tok.ID, fp))
	writeJSON(w, agentapi.CertificateResponse{Certificate: string(cert), CA: string(h.CA.CACertPEM()), Labels: ti.Labels})
	return nil
}

func (h *Handler) getToken(ctx context.Context, tok Token) (*TokenInfo, error) {
	s, err := h.Client.CoreV1().Secrets(Namespace).Get(ctx, SecretName(tok.ID), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, unauthorized("join token %s is not known to this hub (expired tokens are kept; this one was deleted or never created here); create one with `flotilla-hub token create`", tok.ID)
	}
	if err != nil {
		return nil, fmt.Errorf("reading join token %s: %w", tok.ID, err)
	}
	ti, err := parseTokenSecret(s)
	if err != nil {
		return nil, unauthorized("join token %s is damaged: %v; create a new one", tok.ID, err)
	}
	if !ti.matches(tok.Secret) {
		return nil, unauthorized("join token %s: the secret part does not match; check that the whole token was copied", tok.ID)
	}
	return ti, nil
}

func (h *Handler) usable(ti *TokenInfo) error {
	if ti.Expires != nil && !h.now().Before(*ti.Expires) {
		return unauthorized("join token %s expired at %s; create a new one with `flotilla-hub token create`", ti.ID, ti.Expires.UTC().Format(time.RFC3339))
	}
	if ti.UsesLimit > 0 && ti.UsesLeft <= 0 {
		return unauthorized("join token %s has been used for all the %d joins it allowed; create a new one with `flotilla-hub token create --uses N`", ti.ID, ti.UsesLimit)
	}
	return nil
}

func (h *Handler) checkToken(ctx context.Context, tok Token) (*TokenInfo, error) {
	ti, err := h.getToken(ctx, tok)
	if err != nil {
		return nil, err
	}
	return ti, h.usable(ti)
}

// useToken counts one use, with compare-and-swap so that concurrent joins
// never use a token more often than it allows.
func (h *Handler) useToken(ctx context.Context, tok Token) error {
	for range 20 {
		ti, err := h.checkToken(ctx, tok)
		if err != nil {
			return err
		}
		if ti.UsesLimit == 0 {
			return nil
		}
		s := ti.sec.DeepCopy()
		s.Data[keyUsesLeft] = fmt.Appendf(nil, "%d", ti.UsesLeft-1)
		_, err = h.Client.CoreV1().Secrets(Namespace).Update(ctx, s, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("counting a use of join token %s: %w", tok.ID, err)
		}
		return nil
	}
	return apierrors.NewConflict(corev1.Resource("secrets"), SecretName(tok.ID), errors.New("too many concurrent joins with this token; retry"))
}

func nameTaken(node, recorded string) error {
	return apierrors.NewConflict(nodesGR, node, fmt.Errorf(
		"a device with another key (%s) has already joined as %q; if this device replaces it, an admin must delete that Node first (kubectl delete node %s), or join with another --node-name",
		recorded, node, node))
}

func (h *Handler) checkNodeKey(ctx context.Context, node, fp string) error {
	n, err := h.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading node %s: %w", node, err)
	}
	if rec := n.Annotations[auth.AnnotationClientKey]; rec != "" && rec != fp {
		return nameTaken(node, rec)
	}
	return nil
}

// recordNode creates the Node with the token's labels and the device's key
// fingerprint, or adds them to a Node that exists without a key.
func (h *Handler) recordNode(ctx context.Context, node, fp string, labels map[string]string) error {
	nodes := h.Client.CoreV1().Nodes()
	for range 20 {
		n, err := nodes.Get(ctx, node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			n = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
				Labels:      map[string]string{api.LabelHostname: node},
				Annotations: map[string]string{auth.AnnotationClientKey: fp}}}
			for k, v := range labels {
				n.Labels[k] = v
			}
			_, err = nodes.Create(ctx, n, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("creating node %s: %w", node, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading node %s: %w", node, err)
		}
		if rec := n.Annotations[auth.AnnotationClientKey]; rec != "" && rec != fp {
			return nameTaken(node, rec)
		}
		changed := n.Annotations[auth.AnnotationClientKey] != fp
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[auth.AnnotationClientKey] = fp
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		for k, v := range labels {
			if n.Labels[k] != v {
				n.Labels[k], changed = v, true
			}
		}
		if !changed {
			return nil
		}
		_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("recording the key of node %s: %w", node, err)
		}
		return nil
	}
	return apierrors.NewConflict(nodesGR, node, errors.New("too many concurrent changes to this Node; retry"))
}

// renew signs a new certificate for a device that authenticates with its
// current one. The CSR may carry a new key; the Node then records it, and
// the key it replaces as the previous one. The path is public so that a
// certificate that has expired (the device was offline past its end) can
// still renew here, if its key is the one the Node records.
func (h *Handler) renew(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	node, cur, expired, err := h.renewer(r)
	if err != nil {
		return err
	}
	var req agentapi.RenewRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	fp, err := csrKey(req.CSR)
	if err != nil {
		return err
	}
	curFP := auth.CertFingerprint(cur)
	if err := h.checkRevoked(ctx, node, cur); err != nil {
		return err
	}
	n, err := h.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	exists := err == nil
	switch {
	case apierrors.IsNotFound(err):
		if expired {
			return unauthorized("the certificate of %s expired at %s and its Node no longer exists; join again with a new token", node, cur.NotAfter.UTC().Format(time.RFC3339))
		}
	case err != nil:
		return fmt.Errorf("reading node %s: %w", node, err)
	default:
		rec, prev := n.Annotations[auth.AnnotationClientKey], n.Annotations[auth.AnnotationPreviousClientKey]
		switch {
		case rec == "" || rec == curFP:
		case prev == curFP && rec == fp:
			// The answer to this renewal was lost: sign it again.
		default:
			return nameTaken(node, rec)
		}
		if expired && rec != curFP && rec != fp {
			return unauthorized("the certificate of %s expired at %s and its key is not the one Node %s records; join again with a new token", node, cur.NotAfter.UTC().Format(time.RFC3339), node)
		}
	}
	cert, err := h.sign(req.CSR, auth.NodePrefix+node, []string{auth.GroupNodes}, h.nodeTTL())
	if err != nil {
		return err
	}
	// A revocation made while this one was being signed: the device was
	// deleted; the new certificate is dropped. (One made after this read
	// also covers the new certificate: it was issued before.)
	if err := h.checkRevoked(ctx, node, cur); err != nil {
		return err
	}
	if exists {
		// A Node deleted meanwhile revoked the device.
		if err := h.rekey(ctx, node, curFP, fp); err != nil {
			return err
		}
	}
	h.log().Info("device renewed its certificate", "node", node, "key", fp, "expired", expired)
	apiserver.SetAuditReason(ctx, fmt.Sprintf("renewed: node %s, key %s", node, fp))
	writeJSON(w, agentapi.CertificateResponse{Certificate: string(cert), CA: string(h.CA.CACertPEM())})
	return nil
}

// renewer says which device asks for a renewal: the one the request was
// authenticated as, or the one whose expired certificate it carries.
func (h *Handler) renewer(r *http.Request) (node string, cur *x509.Certificate, expired bool, err error) {
	if cur = apiserver.ClientCertificateFrom(r.Context()); cur != nil {
		if node = auth.NodeName(apiserver.UserFrom(r.Context())); node == "" {
			return "", nil, false, apierrors.NewForbidden(corev1.Resource("certificates"), "", errors.New("only a joined device (system:node:NAME, group system:nodes) renews its certificate here"))
		}
		return node, cur, false, nil
	}
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return "", nil, false, unauthorized("renewal needs the device's current certificate (TLS client certificate)")
	}
	cur = r.TLS.PeerCertificates[0]
	maxExpired := h.ExpiredRenewal
	if maxExpired <= 0 {
		maxExpired = DefaultExpiredRenewal
	}
	if err := h.CA.VerifyExpiredClient(cur, r.TLS.PeerCertificates[1:], maxExpired); err != nil {
		return "", nil, false, unauthorized("client certificate %q: %v", cur.Subject.CommonName, err)
	}
	node = auth.NodeName(&apiserver.UserInfo{Name: cur.Subject.CommonName, Groups: cur.Subject.Organization})
	if node == "" {
		return "", nil, false, apierrors.NewForbidden(corev1.Resource("certificates"), "", errors.New("only a joined device (system:node:NAME, group system:nodes) renews its certificate here"))
	}
	// A certificate the authenticator refused although it is in date was
	// refused for a reason of its own (revocation): checkRevoked says it.
	return node, cur, cur.NotAfter.Before(h.now()), nil
}

// checkRevoked refuses a certificate of node issued before the node's
// credentials were revoked. It reads the revocation through the API, not
// from a watch, so that a deletion just made is never missed.
func (h *Handler) checkRevoked(ctx context.Context, node string, cur *x509.Certificate) error {
	rev, ok, err := auth.GetRevocation(ctx, h.Client, auth.NodePrefix+node)
	if err != nil {
		return err
	}
	if ok && rev.Covers(pki.IssuedAt(cur)) {
		return unauthorized("the certificates of %s were revoked at %s (%s); the device must join again with a new token",
			node, rev.RevokedAt.UTC().Format(time.RFC3339), rev.Reason)
	}
	return nil
}

// waitPastRevocation delays signing a certificate for user until it
// escapes the user's revocation: certificates tell their issue time only
// to the second, and one issued in the second of a revocation counts as
// revoked.
func (h *Handler) waitPastRevocation(ctx context.Context, user string) error {
	rev, ok, err := auth.GetRevocation(ctx, h.Client, user)
	if err != nil || !ok {
		return err
	}
	wait := rev.NotBefore().Sub(h.now())
	if wait <= 0 {
		return nil
	}
	if wait > 2*time.Second {
		// A revocation dated in the future (a clock that ran ahead, a
		// hand-edited one) is not waited out.
		return unauthorized("the certificates of %s are revoked until %s; check the revocation (flotilla-hub kubeconfig revoke list)", user, rev.NotBefore().UTC().Format(time.RFC3339))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *Handler) rekey(ctx context.Context, node, from, to string) error {
	nodes := h.Client.CoreV1().Nodes()
	for range 20 {
		n, err := nodes.Get(ctx, node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading node %s: %w", node, err)
		}
		rec := n.Annotations[auth.AnnotationClientKey]
		if rec == to {
			return nil
		}
		if rec != "" && rec != from {
			return nameTaken(node, rec)
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[auth.AnnotationClientKey] = to
		n.Annotations[auth.AnnotationPreviousClientKey] = from
		_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("recording the new key of node %s: %w", node, err)
		}
		return nil
	}
	return apierrors.NewConflict(nodesGR, node, errors.New("too many concurrent changes to this Node; retry"))
}

// user signs a certificate for a person; only admins get here.
func (h *Handler) user(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	u := apiserver.UserFrom(ctx)
	if u == nil || !slices.Contains(u.Groups, auth.GroupAdmins) {
		return apierrors.NewForbidden(corev1.Resource("certificates"), "", errors.New("only admins issue certificates for people"))
	}
	var req UserRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if strings.TrimSpace(req.User) == "" || strings.HasPrefix(req.User, "system:") {
		return apierrors.NewBadRequest(fmt.Sprintf("user %q: give a person's name; names starting with system: are reserved", req.User))
	}
	groups, err := auth.GroupsForRole(req.Role)
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	ttl := DefaultUserCertTTL
	if req.TTL != "" {
		if ttl, err = time.ParseDuration(req.TTL); err != nil || ttl <= 0 {
			return apierrors.NewBadRequest(fmt.Sprintf("ttl %q is not a positive duration like 720h", req.TTL))
		}
	}
	if err := h.waitPastRevocation(ctx, req.User); err != nil {
		return err
	}
	cert, err := h.sign(req.CSR, req.User, groups, ttl)
	if err != nil {
		return err
	}
	apiserver.SetAuditReason(ctx, fmt.Sprintf("issued a %s certificate for %s", req.Role, req.User))
	writeJSON(w, agentapi.CertificateResponse{Certificate: string(cert), CA: string(h.CA.CACertPEM())})
	return nil
}
