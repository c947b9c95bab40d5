package audit_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/hub/audit"
	"flotilla.dev/flotilla/hub/hubtest"
)

// TestHubRefusalFlood: strangers with 8 KiB User-Agents, refused by an
// in-process hub, leave truncated entries within the refusal budget and a
// count of the rest; the admin's change before them stays.
func TestHubRefusalFlood(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	if _, err := h.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "evidence"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	ua := strings.Repeat("A", 8<<10)
	const n = 300
	for range n {
		req, _ := http.NewRequest(http.MethodGet, h.URL()+"/api/v1/secrets", nil)
		req.Header.Set("User-Agent", ua)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("a request without credentials was answered %d", resp.StatusCode)
		}
	}
	path := filepath.Join(h.DataDir, audit.FileName)
	deadline := time.Now().Add(10 * time.Second)
	for {
		es, _ := audit.ReadFile(path)
		var refusals, dropped int64
		evidence := false
		for _, e := range es {
			if len(e.UserAgent) > 256 {
				t.Fatalf("an entry holds a %d-byte User-Agent", len(e.UserAgent))
			}
			switch {
			case e.Verb == audit.VerbDropped:
				dropped += e.Dropped
			case e.User == audit.Anonymous:
				refusals++
				if !e.Truncated || !strings.HasSuffix(e.UserAgent, "…[8192 bytes]") {
					t.Fatalf("refusal %+v", e)
				}
			case e.Resource == "configmaps" && e.Verb == "create" && e.Code == http.StatusCreated:
				evidence = true
			}
		}
		if refusals+dropped == n {
			if !evidence {
				t.Error("the admin's change is not in the log")
			}
			if refusals >= n/2 {
				t.Errorf("%d of %d refusals written: the budget did not apply", refusals, n)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d refusals written and %d counted as dropped, want %d together", refusals, dropped, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
