package pki

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serveTLS serves, with p's ServerTLSConfig, the identity each request's
// client certificate authenticates as.
func serveTLS(t *testing.T, p *PKI) (url string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		TLSConfig: p.ServerTLSConfig(),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			user, _, err := p.Authenticate(r.TLS)
			if err != nil {
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			}
			io.WriteString(w, user)
		}),
	}
	go srv.ServeTLS(ln, "", "")
	return "https://" + ln.Addr().String(), func() { srv.Close() }
}

// TestSessionsResumeAcrossRestarts: a client that connected once resumes
// its TLS session on its next connection — after the hub restarted with
// the same data dir too, and after the ticket key rotated — and is still
// the identity of its certificate; tickets sealed with a key rotated out
// get a full handshake.
func TestSessionsResumeAcrossRestarts(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	p := mustLoad(t, dir, testOptions(clock))
	certPEM, keyPEM, err := p.IssueClientCert("alice", nil, 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.CACert())
	clientTLS := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	// get connects anew (a transport of its own) and says whether the
	// session was resumed.
	get := func(what, url string) bool {
		t.Helper()
		tr := &http.Transport{TLSClientConfig: clientTLS}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get(url)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != "alice" {
			t.Fatalf("%s: %s %q, want alice", what, resp.Status, body)
		}
		return resp.TLS.DidResume
	}
	keyLines := func() int {
		t.Helper()
		b := readFile(t, filepath.Join(dir, TicketKeysFile))
		return strings.Count(string(b), "\n")
	}
	st, err := os.Stat(filepath.Join(dir, TicketKeysFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, mode %v, want 0600", TicketKeysFile, err, st.Mode().Perm())
	}

	url, stop := serveTLS(t, p)
	if get("first connection", url) {
		t.Error("the first connection resumed a session it never had")
	}
	if !get("second connection", url) {
		t.Error("the second connection did not resume")
	}
	if full, resumed := p.Handshakes(); full != 1 || resumed != 1 {
		t.Errorf("counted %d full and %d resumed handshakes, want 1 and 1", full, resumed)
	}
	stop()

	p = mustLoad(t, dir, testOptions(clock))
	url, stop = serveTLS(t, p)
	defer func() { stop() }()
	if !get("after a restart", url) {
		t.Error("a session did not resume after the hub restarted with the same data dir")
	}

	clock.Advance(ticketKeyRotation + time.Hour)
	if err := p.rotateTicketKeys(); err != nil {
		t.Fatal(err)
	}
	if n := keyLines(); n != 2 {
		t.Fatalf("%d keys after a rotation, want the new one and the old", n)
	}
	if !get("after a rotation", url) {
		t.Error("a ticket sealed with the previous key did not resume")
	}

	clock.Advance(ticketKeyRetain)
	if err := p.rotateTicketKeys(); err != nil {
		t.Fatal(err)
	}
	if n := keyLines(); n != 1 {
		t.Fatalf("%d keys after both aged out, want only a new one", n)
	}
	if get("after the keys aged out", url) {
		t.Error("a ticket sealed with a key rotated out resumed")
	}
}

// TestUnreadableTicketKeysAreReplaced: the ticket keys are disposable; a
// damaged file is replaced (clients do one full handshake) rather than
// keeping the hub from starting.
func TestUnreadableTicketKeysAreReplaced(t *testing.T) {
	dir := t.TempDir()
	mustLoad(t, dir, testOptions(nil))
	path := filepath.Join(dir, TicketKeysFile)
	if err := os.WriteFile(path, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := mustLoad(t, dir, testOptions(nil))
	if _, err := readTicketKeys(path); err != nil {
		t.Fatalf("the damaged keys file was not replaced: %v", err)
	}
	if p.tickets.Load() == nil {
		t.Fatal("no ticket key after replacing a damaged file")
	}
	if ss, err := p.unwrapSession([]byte("garbage that is no ticket"), tls.ConnectionState{}); ss != nil || err != nil {
		t.Errorf("a garbage ticket: %v, %v; want a full handshake (nil, nil)", ss, err)
	}
}
