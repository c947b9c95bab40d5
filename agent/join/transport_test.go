package join

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A device's first request on a connection shrinks the HPACK table its
// headers are encoded in to RequestHeaderTableSize (a dynamic table size
// update, RFC 7541 6.3, first in the header block): the hub then keeps
// no larger a table to decode them. Read here as the bytes on the wire,
// from a TLS listener that speaks HTTP/2 by hand.
func TestRequestsShrinkTheHeaderTable(t *testing.T) {
	// httptest's certificate, served by a listener of the test's own.
	ts := httptest.NewUnstartedServer(nil)
	ts.StartTLS()
	cert, roots := ts.TLS.Certificates[0], x509.NewCertPool()
	roots.AddCert(ts.Certificate())
	ts.Close()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := hubTransport(&tls.Config{RootCAs: roots})
	defer tr.CloseIdleConnections()
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+ln.Addr().String()+"/healthz", nil)
		if resp, err := tr.RoundTrip(req); err == nil {
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
	if tc := conn.(*tls.Conn); tc.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatalf("negotiated %q, want h2", tc.ConnectionState().NegotiatedProtocol)
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
		// 001 and the size as an integer with a 5-bit prefix (RFC 7541
		// 5.1): 512 is 31 + 481, 481 in 7-bit groups.
		want := []byte{0x3f, 0xe1, 0x03}
		if !bytes.HasPrefix(payload, want) {
			t.Fatalf("the first header block starts % x, want the table size update to %d (% x)", payload[:min(len(payload), 4)], RequestHeaderTableSize, want)
		}
		return
	}
}
