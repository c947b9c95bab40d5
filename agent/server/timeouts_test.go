package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"flotilla.dev/flotilla/api/agentapi"
)

// closedWithin checks that the server closes c within d (reading what it
// still sends).
func closedWithin(t *testing.T, c net.Conn, d time.Duration, what string) {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(d + 5*time.Second))
	_, err := io.Copy(io.Discard, c)
	if took := time.Since(start); took > d {
		t.Errorf("%s: the connection was closed after %v (%v), want within %v", what, took.Round(10*time.Millisecond), err, d)
	}
}

// The agent's server bounds how long a caller may hold a connection:
// slow headers, a body that never ends and an idle connection are cut,
// while a followed log streams on past the answers' write deadline (over
// HTTP/1.1 too, where the connection kept the deadline of its previous
// answer).
func TestServerTimeouts(t *testing.T) {
	hubCA := newPKI(t)
	dir := t.TempDir()
	d := podLogs(t, dir, "default", "web", "u1", "app")
	write(t, filepath.Join(d, "0.log"), criLine(0, "stdout", "F", "hello"))
	cert, err := LoadOrCreateServingCert(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	pin, _ := CertHash(cert)
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "go_goroutines 7\n") })
	s, err := New(Config{Listen: "127.0.0.1:0", LogDir: dir, Certificate: cert, ClientCAs: hubCA.CAPool(), Metrics: metrics,
		Poll: 10 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, IdleTimeout: 500 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
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
	addr := s.Addr().String()
	adminCert, adminKey := hubCA.AdminCredentials()
	admin, err := tls.X509KeyPair(adminCert, adminKey)
	if err != nil {
		t.Fatal(err)
	}
	dial := func(client *tls.Certificate) net.Conn {
		t.Helper()
		cfg := agentapi.PinnedTLSConfig(pin, client)
		cfg.NextProtos = []string{"http/1.1"}
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	c := dial(nil)
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: agent\r\n")
	closedWithin(t, c, 2*time.Second, "headers never finished")

	c = dial(nil)
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: agent\r\nContent-Length: 1000\r\n\r\nab")
	closedWithin(t, c, 2*time.Second, "a body never finished")

	c = dial(nil)
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: agent\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	closedWithin(t, c, 2*time.Second, "an idle kept-alive connection")

	// On one HTTP/1.1 connection: metrics (with a write deadline), then a
	// followed log that outlives it.
	c = dial(&admin)
	br = bufio.NewReader(c)
	fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n")
	if resp, err = http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	fmt.Fprintf(c, "GET /containerLogs/default/web/app?follow=true&tailLines=0 HTTP/1.1\r\nHost: agent\r\n\r\n")
	if resp, err = http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("follow: %v %v", resp, err)
	}
	lines := bufio.NewReader(resp.Body)
	for i := range 3 {
		time.Sleep(400 * time.Millisecond) // past the write deadline, the read and the idle timeouts
		f, err := os.OpenFile(filepath.Join(d, "0.log"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(criLine(i+1, "stdout", "F", fmt.Sprintf("line %d", i)))
		f.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := lines.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != fmt.Sprintf("line %d", i) {
			t.Fatalf("followed line %d after %v: %q, %v", i, time.Duration(i+1)*400*time.Millisecond, line, err)
		}
	}

	// Over HTTP/2 too.
	tr := &http.Transport{TLSClientConfig: agentapi.PinnedTLSConfig(pin, &admin), ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err = (&http.Client{Transport: tr}).Get("https://" + addr + "/containerLogs/default/web/app?follow=true&tailLines=0")
	if err != nil || resp.ProtoMajor != 2 {
		t.Fatalf("follow over HTTP/2: %v %v", resp, err)
	}
	defer resp.Body.Close()
	lines = bufio.NewReader(resp.Body)
	time.Sleep(time.Second)
	f, err := os.OpenFile(filepath.Join(d, "0.log"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(criLine(9, "stdout", "F", "h2 line"))
	f.Close()
	if line, err := lines.ReadString('\n'); err != nil || line != "h2 line\n" {
		t.Fatalf("followed over HTTP/2 after 1 s: %q, %v", line, err)
	}
}
