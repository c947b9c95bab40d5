package hub_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/auth"
	"flotilla.dev/flotilla/hub/hubtest"
)

// get fetches path from the hub as the user of cfg: status and body.
func get(t *testing.T, cfg *rest.Config, path string) (int, string) {
	t.Helper()
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// An admin reads the hub's profiles; a viewer may not, and a hub started
// with --profiling=false serves none.
func TestProfiles(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{Profiling: true})
	if code, body := get(t, h.Config, hub.PathProfiles+"heap?debug=1"); code != http.StatusOK || !strings.Contains(body, "heap profile") {
		t.Errorf("admin GET heap profile: %d %.200q", code, body)
	}
	if code, body := get(t, h.Config, hub.PathProfiles+"profile?seconds=1"); code != http.StatusOK || len(body) == 0 {
		t.Errorf("admin GET CPU profile: %d, %d bytes", code, len(body))
	}
	cert, key, err := h.PKI().IssueClientCert("watcher", []string{auth.GroupViewers}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	viewer := rest.CopyConfig(h.Config)
	viewer.CertData, viewer.KeyData = cert, key
	if code, body := get(t, viewer, hub.PathProfiles+"goroutine?debug=2"); code != http.StatusForbidden || !strings.Contains(body, "for admins") {
		t.Errorf("viewer GET goroutine profile: %d %.200q; want 403 saying profiles are for admins", code, body)
	}

	off := hubtest.Start(t)
	if code, _ := get(t, off.Config, hub.PathProfiles+"heap"); code != http.StatusNotFound {
		t.Errorf("GET heap profile of a hub without profiling: %d, want 404", code)
	}
}
