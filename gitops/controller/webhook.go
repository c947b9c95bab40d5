package controller

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HooksPath is where the webhook receiver is mounted; it serves
// HooksPath + "<namespace>/<name>".
const HooksPath = "/hooks/git/"

// WebhookTokenKey is the key of the webhook Secret that signs calls.
const WebhookTokenKey = "token"

const maxHookBody = 1 << 20

// Hooks receives Git forge webhooks and wakes the loop for the source
// named in the path. Calls must be signed with HMAC-SHA256 of the body
// under the token in the source's webhook Secret, as GitHub
// (X-Hub-Signature-256: sha256=<hex>) and Gitea (X-Gitea-Signature: <hex>)
// send it. It is mounted without authentication: the signature is the
// authentication. The body is not trusted for anything else: the loop
// asks the remote itself.
type Hooks struct {
	mu   sync.RWMutex
	ctrl *Controller
}

var _ http.Handler = (*Hooks)(nil)

// NewHooks returns a receiver that answers 503 until a Controller whose
// Config names it runs; it logs through that Controller.
func NewHooks() *Hooks { return &Hooks{} }

func (h *Hooks) attach(c *Controller) {
	h.mu.Lock()
	h.ctrl = c
	h.mu.Unlock()
}

func (h *Hooks) controller() *Controller {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.ctrl
}

// ServeHTTP verifies and accepts one webhook call.
func (h *Hooks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "webhooks are POSTed", http.StatusMethodNotAllowed)
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, HooksPath), "/")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		http.Error(w, "the path must be "+HooksPath+"<namespace>/<name> of a GitSource", http.StatusNotFound)
		return
	}
	ns, name := parts[0], parts[1]
	c := h.controller()
	if c == nil {
		http.Error(w, "the GitOps loop is not running yet", http.StatusServiceUnavailable)
		return
	}
	log := c.log.With("handler", "git-webhook")
	body, err := io.ReadAll(io.LimitReader(r.Body, maxHookBody+1))
	if err != nil {
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > maxHookBody {
		http.Error(w, "the body is larger than 1 MiB", http.StatusRequestEntityTooLarge)
		return
	}
	// One answer for an unknown source, a source without a webhook
	// Secret and a bad signature, so that the receiver tells an
	// unauthenticated caller nothing about which sources exist.
	const refused = "forbidden: the signature does not match a webhook Secret of this GitSource"
	gs, ok := c.cached(ns, name)
	if !ok || gs.Spec.WebhookSecretRef == nil {
		http.Error(w, refused, http.StatusForbidden)
		return
	}
	s, err := c.kube.CoreV1().Secrets(ns).Get(r.Context(), gs.Spec.WebhookSecretRef.Name, metav1.GetOptions{})
	if err != nil {
		log.Warn("webhook refused: the webhook Secret cannot be read", "source", ns+"/"+name, "secret", gs.Spec.WebhookSecretRef.Name, "err", err)
		http.Error(w, refused, http.StatusForbidden)
		return
	}
	token := s.Data[WebhookTokenKey]
	if len(token) == 0 {
		token = []byte(s.StringData[WebhookTokenKey])
	}
	if len(token) == 0 || !validSignature(r.Header, body, token) {
		log.Info("webhook refused: bad or missing signature", "source", ns+"/"+name)
		http.Error(w, refused, http.StatusForbidden)
		return
	}
	c.Trigger(ns, name)
	log.Debug("webhook accepted", "source", ns+"/"+name, "event", firstHeader(r.Header, "X-GitHub-Event", "X-Gitea-Event"))
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, "reconcile queued\n")
}

func validSignature(hdr http.Header, body, token []byte) bool {
	mac := hmac.New(sha256.New, token)
	mac.Write(body)
	want := mac.Sum(nil)
	sig := hdr.Get("X-Hub-Signature-256")
	if sig != "" {
		if !strings.HasPrefix(sig, "sha256=") {
			return false
		}
		sig = strings.TrimPrefix(sig, "sha256=")
	} else {
		sig = firstHeader(hdr, "X-Gitea-Signature", "X-Gogs-Signature")
	}
	got, err := hex.DecodeString(strings.TrimSpace(sig))
	if err != nil || len(got) == 0 {
		return false
	}
	return hmac.Equal(got, want)
}

func firstHeader(h http.Header, names ...string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
}
