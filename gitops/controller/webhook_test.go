package controller

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestValidSignature(t *testing.T) {
	body, token := []byte(`{"ref":"refs/heads/main"}`), []byte("s3cret")
	mac := hmac.New(sha256.New, token)
	mac.Write(body)
	good := hex.EncodeToString(mac.Sum(nil))
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		ok   bool
	}{
		{"github", map[string]string{"X-Hub-Signature-256": "sha256=" + good}, true},
		{"gitea", map[string]string{"X-Gitea-Signature": good}, true},
		{"gogs", map[string]string{"X-Gogs-Signature": good}, true},
		{"github without prefix", map[string]string{"X-Hub-Signature-256": good}, false},
		{"wrong", map[string]string{"X-Hub-Signature-256": "sha256=" + strings.Repeat("ab", 32)}, false},
		{"not hex", map[string]string{"X-Gitea-Signature": "zz"}, false},
		{"none", nil, false},
	} {
		h := http.Header{}
		for k, v := range tc.hdr {
			h.Set(k, v)
		}
		if got := validSignature(h, body, token); got != tc.ok {
			t.Errorf("%s: valid = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

func TestHooksBeforeTheLoopRuns(t *testing.T) {
	h := NewHooks()
	for _, tc := range []struct {
		method, path string
		code         int
	}{
		{http.MethodGet, HooksPath + "default/x", http.StatusMethodNotAllowed},
		{http.MethodPost, HooksPath + "default", http.StatusNotFound},
		{http.MethodPost, HooksPath + "default/x/y", http.StatusNotFound},
		{http.MethodPost, HooksPath + "default/x", http.StatusServiceUnavailable},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, strings.NewReader("{}")))
		if rec.Code != tc.code {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, rec.Code, tc.code)
		}
	}
}
