package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/pki"
)

func newPKI(t *testing.T) *pki.PKI {
	t.Helper()
	p, err := pki.LoadOrCreate(t.TempDir(), pki.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// clientFor talks to the server as the hub does: pinning its certificate.
func clientFor(t *testing.T, pin string, certPEM, keyPEM []byte) *http.Client {
	t.Helper()
	var client *tls.Certificate
	if certPEM != nil {
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		client = &c
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: agentapi.PinnedTLSConfig(pin, client)}, Timeout: 20 * time.Second}
}

func TestServerAuthAndLogs(t *testing.T) {
	hubCA := newPKI(t)
	otherCA := newPKI(t)
	dir := t.TempDir()
	d := podLogs(t, dir, "default", "web", "u1", "app")
	write(t, filepath.Join(d, "0.log"), criLine(0, "stdout", "F", "hello"), criLine(1, "stderr", "F", "world"))

	certDir := t.TempDir()
	cert, err := LoadOrCreateServingCert(certDir, []string{"127.0.0.1", "edge-1"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadOrCreateServingCert(certDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	pin, _ := CertHash(cert)
	if pin2, _ := CertHash(again); pin2 != pin || !strings.HasPrefix(pin, "sha256:") {
		t.Errorf("the serving certificate changed across loads: %s vs %s", pin, pin2)
	}
	if st, err := os.Stat(filepath.Join(certDir, "serving.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("serving.key mode: %v %v", st.Mode(), err)
	}

	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "go_goroutines 7\n") })
	s, err := New(Config{Listen: "127.0.0.1:0", LogDir: dir, Certificate: cert, ClientCAs: hubCA.CAPool(), Metrics: metrics, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	base := "https://" + s.Addr().String()

	adminCert, adminKey := hubCA.AdminCredentials()
	nodeCert, nodeKey, err := hubCA.IssueClientCert("system:node:edge-2", []string{"system:nodes"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreignCert, foreignKey := otherCA.AdminCredentials()

	get := func(c *http.Client, path string) (int, string) {
		t.Helper()
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	admin := clientFor(t, pin, adminCert, adminKey)
	for _, tc := range []struct {
		name   string
		client *http.Client
		path   string
		code   int
		body   string
	}{
		{"healthz needs no certificate", clientFor(t, pin, nil, nil), "/healthz", 200, "ok"},
		{"no certificate", clientFor(t, pin, nil, nil), "/containerLogs/default/web/app", 401, "client certificate"},
		{"another CA", clientFor(t, pin, foreignCert, foreignKey), "/containerLogs/default/web/app", 401, "unknown authority"},
		{"a node, not the hub", clientFor(t, pin, nodeCert, nodeKey), "/containerLogs/default/web/app", 403, "system:node:edge-2"},
		{"the hub", admin, "/containerLogs/default/web/app", 200, "hello\nworld\n"},
		{"tail and timestamps", admin, "/containerLogs/default/web/app?tailLines=1&timestamps=true", 200, "2030-05-01T12:00:01Z world\n"},
		{"limit", admin, "/containerLogs/default/web/app?limitBytes=3", 200, "hel"},
		{"bad option", admin, "/containerLogs/default/web/app?tailLines=x", 400, "tailLines"},
		{"no previous", admin, "/containerLogs/default/web/app?previous=true", 400, "previous terminated container"},
		{"unknown pod", admin, "/containerLogs/default/nope/app", 404, "pod default/nope has no logs"},
		{"unknown path", admin, "/exec/default/web/app", 404, ""},
		{"metrics", admin, "/metrics", 200, "go_goroutines 7"},
		{"metrics need the hub", clientFor(t, pin, nil, nil), "/metrics", 401, "client certificate"},
	} {
		code, body := get(tc.client, tc.path)
		if code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("%s: %d %q, want %d with %q", tc.name, code, body, tc.code, tc.body)
		}
	}

	// A follow streams lines as they are written.
	resp, err := admin.Get(base + "/containerLogs/default/web/app?follow=true&tailLines=0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	f, err := os.OpenFile(filepath.Join(d, "0.log"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(criLine(2, "stdout", "F", "streamed"))
	f.Close()
	buf := make([]byte, 64)
	n, err := io.ReadAtLeast(resp.Body, buf, len("streamed\n"))
	if err != nil || string(buf[:n]) != "streamed\n" {
		t.Errorf("followed %q, %v", buf[:n], err)
	}
}

func TestNewRefusesIncompleteConfig(t *testing.T) {
	cert, err := LoadOrCreateServingCert(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	for name, cfg := range map[string]Config{
		"no log dir": {Listen: "127.0.0.1:0", Certificate: cert, ClientCAs: pool},
		"no cert":    {Listen: "127.0.0.1:0", LogDir: "/x", ClientCAs: pool},
		"no CA":      {Listen: "127.0.0.1:0", LogDir: "/x", Certificate: cert},
		"bad listen": {Listen: "nonsense", LogDir: "/x", Certificate: cert, ClientCAs: pool},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}
