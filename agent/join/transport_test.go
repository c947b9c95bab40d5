package join

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// A device's first request on a connection shrinks the HPACK table its
// headers are encoded in to RequestHeaderTableSize (a dynamic table size
// update, RFC 7541 6.3, first in the header block): the hub then keeps
// no larger a table to decode them. Read here as the bytes on the wire,
// from a TLS listener that speaks HTTP/2 by hand, for the identity's own
// transport and for those client-go makes for configs as the agent
// writes them (WithSmallHeaderTable).
func TestRequestsShrinkTheHeaderTable(t *testing.T) {
	// httptest's certificate, served by a listener of the test's own.
	ts := httptest.NewUnstartedServer(nil)
	ts.StartTLS()
	cert, roots := ts.TLS.Certificates[0], x509.NewCertPool()
	roots.AddCert(ts.Certificate())
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	ts.Close()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	url := "https://" + ln.Addr().String()

	cfg := &rest.Config{Host: url, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}}
	cfg.Wrap(WithSmallHeaderTable)
	agentRT, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// As JoinCredentials writes it: a certificate file client-go reloads
	// when it rotates, and hubconn's dialer.
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile := filepath.Join(t.TempDir(), "device.pem")
	pemData := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})...)
	if err := os.WriteFile(certFile, pemData, 0o600); err != nil {
		t.Fatal(err)
	}
	joined := &rest.Config{Host: url, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM, CertFile: certFile, KeyFile: certFile},
		Dial: (&net.Dialer{}).DialContext}
	joined.Wrap(WithSmallHeaderTable)
	joinedRT, err := rest.TransportFor(joined)
	if err != nil {
		t.Fatal(err)
	}
	identityRT := hubTransport(&tls.Config{RootCAs: roots})
	defer identityRT.CloseIdleConnections()
	for name, rt := range map[string]http.RoundTripper{"identity": identityRT, "kubeconfig": agentRT, "joined": joinedRT} {
		t.Run(name, func(t *testing.T) {
			block := firstHeaderBlock(t, ln, rt, url)
			// 001 and the size as an integer with a 5-bit prefix (RFC
			// 7541 5.1): 512 is 31 + 481, 481 in 7-bit groups.
			want := []byte{0x3f, 0xe1, 0x03}
			if !bytes.HasPrefix(block, want) {
				t.Fatalf("the first header block starts % x, want the table size update to %d (% x)", block[:min(len(block), 4)], RequestHeaderTableSize, want)
			}
		})
	}
}

// firstHeaderBlock sends a request through rt and returns the header
// block of the first HEADERS frame the listener receives.
func firstHeaderBlock(t *testing.T, ln net.Listener, rt http.RoundTripper, url string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/healthz", nil)
		if resp, err := rt.RoundTrip(req); err == nil {
			resp.Body.Close()
		}
	}()

	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	preface := make([]byte, len("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	if _, err := io.ReadFull(conn, preface); err != nil {
		t.Fatalf("reading the client preface: %v", err)
	}
	if p := conn.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q, want h2", p)
	}
	const frameHeaders = 0x1
	for {
		hdr := make([]byte, 9)
		if _, err := io.ReadFull(conn, hdr); err != nil {
			t.Fatalf("reading a frame: %v", err)
		}
		payload := make([]byte, int(hdr[0])<<16|int(hdr[1])<<8|int(hdr[2]))
		if _, err := io.ReadFull(conn, payload); err != nil {
			t.Fatalf("reading a frame's payload: %v", err)
		}
		if hdr[3] != frameHeaders {
			continue
		}
		if id := binary.BigEndian.Uint32(hdr[5:]) & 0x7fffffff; id != 1 {
			t.Fatalf("the first HEADERS frame is of stream %d, want 1", id)
		}
		return payload
	}
}

// The device's TLS sessions are shared by its identity's connections and
// by the transports client-go makes for configs as the agent writes them
// (WithSessionCache), and a renewal empties them (Reset), so that no
// connection made after it presents the old certificate.
func TestSessionCacheIsShared(t *testing.T) {
	c := &SessionCache{}
	cfg := &rest.Config{Host: "https://127.0.0.1:1", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	cfg.Wrap(WithSmallHeaderTable)
	cfg.Wrap(WithSessionCache(c))
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr := NetHTTPTransport(rt)
	if tr == nil || tr.TLSClientConfig == nil || tr.TLSClientConfig.ClientSessionCache != c {
		t.Fatal("client-go's transport does not use the device's session cache")
	}
	if tr.HTTP2 == nil || tr.HTTP2.MaxEncoderHeaderTableSize != RequestHeaderTableSize {
		t.Error("the session cache's wrapper lost the small header table")
	}
	id := &Identity{pool: x509.NewCertPool(), sessions: c}
	if id.TLSConfig().ClientSessionCache != c {
		t.Error("the identity's own connections do not use its session cache")
	}

	c.Put("hub", &tls.ClientSessionState{})
	if _, ok := c.Get("hub"); !ok {
		t.Fatal("a session put is not there")
	}
	c.Reset()
	if s, ok := c.Get("hub"); ok || s != nil {
		t.Error("a session survived Reset")
	}
}
