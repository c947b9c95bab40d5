package handshake_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"flotilla.dev/flotilla/hub/handshake"
)

// serverConfig is a TLS 1.3 server with a fresh self-signed certificate,
// and the pool its clients trust.
func serverConfig(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "hub"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos:   []string{"h2", "http/1.1"},
	}, pool
}

func listen(t *testing.T, opts handshake.Options) (*handshake.Listener, *x509.CertPool, *prometheus.Registry) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg, pool := serverConfig(t)
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	l, err := handshake.NewListener(inner, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, pool, reg
}

func count(t *testing.T, reg *prometheus.Registry, result string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "flotilla_tls_handshakes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == result {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return -1
}

// TestServesHTTPAndHTTP2: http.Server serves the listener's connections
// as it serves tls.NewListener's, HTTP/2 negotiated in the handshake.
func TestServesHTTPAndHTTP2(t *testing.T) {
	l, pool, reg := listen(t, handshake.Options{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	for _, tc := range []struct {
		protos []string
		want   string
	}{{[]string{"h2"}, "HTTP/2.0"}, {[]string{"http/1.1"}, "HTTP/1.1"}} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, NextProtos: tc.protos}, ForceAttemptHTTP2: tc.protos[0] == "h2"}
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + l.Addr().String())
		if err != nil {
			t.Fatalf("%v: %v", tc.protos, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if string(body) != tc.want || resp.Proto != tc.want {
			t.Errorf("offering %v: served %q, answered over %s; want %s", tc.protos, body, resp.Proto, tc.want)
		}
	}
	if got := count(t, reg, "done"); got != 2 {
		t.Errorf("handshakes done: %d, want 2", got)
	}
}

// silent opens a connection that never says a word: its handshake waits
// until the listener's Timeout.
func silent(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func handshakeWithin(addr string, pool *x509.CertPool, within time.Duration) error {
	d := &net.Dialer{Timeout: within}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		return err
	}
	return c.Close()
}

// TestNewestFirstAndStaleDropped: with every handshake slot taken by a
// client that says nothing, a new client is served as soon as a slot
// frees, before the connections that waited longer; one that waited past
// MaxWait is closed without a handshake.
func TestNewestFirstAndStaleDropped(t *testing.T) {
	const slots = 2
	l, pool, reg := listen(t, handshake.Options{Concurrency: slots, Timeout: 500 * time.Millisecond, MaxWait: 3 * time.Second})
	addr := l.Addr().String()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	// Slots busy for 500 ms, then 20 more silent connections queue
	// behind them: served in order, they would hold the slots for 5 s.
	for range slots + 20 {
		silent(t, addr)
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	if err := handshakeWithin(addr, pool, 10*time.Second); err != nil {
		t.Fatalf("the newest client's handshake: %v", err)
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("the newest client waited %v behind older connections", took)
	}
	// The older silent ones are taken after it, each for its timeout,
	// until what remains has waited past MaxWait and is dropped.
	deadline := time.Now().Add(10 * time.Second)
	for count(t, reg, "dropped") == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := count(t, reg, "dropped"); got <= 0 {
		t.Errorf("no connection that waited past MaxWait was dropped (dropped %d)", got)
	}
	if got := count(t, reg, "failed"); got < slots {
		t.Errorf("handshakes failed: %d, want at least the %d silent clients timed out", got, slots)
	}
}

// TestTooManyWaiting: past MaxPending the oldest waiting connection is
// closed.
func TestTooManyWaiting(t *testing.T) {
	l, _, reg := listen(t, handshake.Options{Concurrency: 1, Timeout: 5 * time.Second, MaxPending: 2})
	addr := l.Addr().String()
	busy := silent(t, addr)
	_ = busy
	time.Sleep(100 * time.Millisecond)
	oldest := silent(t, addr)
	for range 2 {
		time.Sleep(20 * time.Millisecond)
		silent(t, addr)
	}
	_ = oldest.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := oldest.Read(make([]byte, 1)); err == nil || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("the oldest waiting connection was not closed by the listener: %v", err)
	}
	if got := count(t, reg, "dropped"); got != 1 {
		t.Errorf("dropped %d, want 1", got)
	}
	if got, err := testutil.GatherAndCount(reg, "flotilla_tls_handshakes_waiting"); err != nil || got != 1 {
		t.Fatalf("waiting gauge: %d series, %v", got, err)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "flotilla_tls_handshakes_waiting" {
			if got := mf.GetMetric()[0].GetGauge().GetValue(); got != 2 {
				t.Errorf("waiting %v, want 2", got)
			}
		}
	}
}

// TestClose: Accept returns net.ErrClosed, and connections waiting or in
// a handshake are closed.
func TestClose(t *testing.T) {
	l, _, _ := listen(t, handshake.Options{Concurrency: 1, Timeout: time.Minute})
	addr := l.Addr().String()
	inHandshake := silent(t, addr)
	time.Sleep(50 * time.Millisecond)
	waitingConn := silent(t, addr)
	time.Sleep(50 * time.Millisecond)
	accepted := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		accepted <- err
	}()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-accepted:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not return after Close")
	}
	for name, c := range map[string]net.Conn{"in a handshake": inHandshake, "waiting": waitingConn} {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
			t.Errorf("the connection %s was not closed: %v", name, err)
		}
	}
}
