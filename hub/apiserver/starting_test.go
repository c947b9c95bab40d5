package apiserver

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/store/boltstore"
)

// TestStartingHubSpreadsItsClients: before its cache is loaded the hub
// answers 503 with a Retry-After of 1 to 4 seconds, for a resource and
// for a device's watches stream alike, and not the same to everyone.
func TestStartingHubSpreadsItsClients(t *testing.T) {
	s := startingServer(t, benchAuth{})
	seen := map[string]int{}
	for i := range 40 {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil)
		if i%2 == 1 {
			r = httptest.NewRequest(http.MethodPost, agentapi.PathWatches, strings.NewReader(`{"watches":[{"id":1,"path":"/api/v1/pods","query":"watch=true"}]}`))
			r.Header.Set("Content-Type", "application/json")
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %s to a starting hub: %d %s, want 503", r.Method, r.URL.Path, w.Code, w.Body)
		}
		ra := w.Header().Get("Retry-After")
		if n, err := strconv.Atoi(ra); err != nil || n < 1 || n > 4 {
			t.Fatalf("%s %s to a starting hub: Retry-After %q, want 1 to 4 seconds", r.Method, r.URL.Path, ra)
		}
		seen[ra]++
	}
	if len(seen) < 2 {
		t.Errorf("40 clients of a starting hub were all told to retry in the same time: %v", seen)
	}
}

// notYetAuth cannot check credentials yet.
type notYetAuth struct{ benchAuth }

func (notYetAuth) Authenticate(*http.Request) (*UserInfo, error) {
	return nil, fmt.Errorf("checking a certificate: %w", ErrCannotAuthenticateYet)
}

// TestHubThatCannotAuthenticateYet: a client the hub cannot check yet
// (after a restart, before it has loaded its revocations) is told 503 and
// when to come back, not 401 (its credentials are not known to be bad),
// for a resource and for a device's tunnel alike.
func TestHubThatCannotAuthenticateYet(t *testing.T) {
	s := startingServer(t, notYetAuth{})
	for _, path := range []string{"/api/v1/pods", agentapi.PathTunnel} {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		retry, _ := strconv.Atoi(w.Header().Get("Retry-After"))
		if w.Code != http.StatusServiceUnavailable || retry < 1 || retry > 4 || !strings.Contains(w.Body.String(), "cannot check credentials yet") {
			t.Errorf("GET %s from a client the hub cannot check yet: %d, Retry-After %q, %s; want 503 with a Retry-After of 1 to 4 s",
				path, w.Code, w.Header().Get("Retry-After"), w.Body)
		}
	}
}

// startingServer is a server on a store of its own that is never run, so
// never ready: a hub still loading its cache.
func startingServer(t *testing.T, authn Authenticator) *Server {
	t.Helper()
	st, err := boltstore.Open(filepath.Join(t.TempDir(), "state.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s, err := New(Config{Store: st, Authenticator: authn, Authorizer: benchAuth{}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
