package hub_test

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/hubtest"
)

// HTTP/2 frame types and settings (RFC 9113), spoken by hand here so that
// the test sees the bytes the hub sends rather than what a client library
// makes of them.
const (
	frameHeaders  = 0x1
	frameSettings = 0x4
	frameGoAway   = 0x7

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4

	settingHeaderTableSize = 0x1
	settingMaxFrameSize    = 0x5
)

type frame struct {
	typ, flags byte
	stream     uint32
	payload    []byte
}

func writeFrame(t *testing.T, w io.Writer, f frame) {
	t.Helper()
	hdr := make([]byte, 9)
	hdr[0], hdr[1], hdr[2] = byte(len(f.payload)>>16), byte(len(f.payload)>>8), byte(len(f.payload))
	hdr[3], hdr[4] = f.typ, f.flags
	binary.BigEndian.PutUint32(hdr[5:], f.stream)
	if _, err := w.Write(append(hdr, f.payload...)); err != nil {
		t.Fatalf("writing a frame: %v", err)
	}
}

func readFrame(t *testing.T, r io.Reader) frame {
	t.Helper()
	hdr := make([]byte, 9)
	if _, err := io.ReadFull(r, hdr); err != nil {
		t.Fatalf("reading a frame: %v", err)
	}
	f := frame{typ: hdr[3], flags: hdr[4], stream: binary.BigEndian.Uint32(hdr[5:]) & 0x7fffffff,
		payload: make([]byte, int(hdr[0])<<16|int(hdr[1])<<8|int(hdr[2]))}
	if _, err := io.ReadFull(r, f.payload); err != nil {
		t.Fatalf("reading a frame's payload: %v", err)
	}
	return f
}

// literal is an HPACK header field without indexing whose name is entry
// idx of the static table, its value not Huffman-coded (RFC 7541 6.2.2).
func literal(idx byte, value string) []byte {
	return append([]byte{idx, byte(len(value))}, value...)
}

// tableSizeUpdate is HPACK's dynamic table size update (RFC 7541 6.3):
// 001 and the size as an integer with a 5-bit prefix (5.1).
func tableSizeUpdate(size int) []byte {
	if size < 31 {
		return []byte{0x20 | byte(size)}
	}
	b := []byte{0x3f}
	for size -= 31; size >= 128; size >>= 7 {
		b = append(b, byte(size&0x7f|0x80))
	}
	return append(b, byte(size))
}

// hpackInt is an HPACK integer (RFC 7541 5.1) with an n-bit prefix, its
// first byte's high bits set to flags.
func hpackInt(flags byte, n uint, v int) []byte {
	limit := 1<<n - 1
	if v < limit {
		return []byte{flags | byte(v)}
	}
	b := []byte{flags | byte(limit)}
	for v -= limit; v >= 128; v >>= 7 {
		b = append(b, byte(v&0x7f|0x80))
	}
	return append(b, byte(v))
}

// indexedLiteral is a header field with incremental indexing and a new
// name (RFC 7541 6.2.1): the decoder adds it to its dynamic table.
func indexedLiteral(name, value string) []byte {
	b := append([]byte{0x40}, hpackInt(0, 7, len(name))...)
	b = append(b, name...)
	b = append(b, hpackInt(0, 7, len(value))...)
	return append(b, value...)
}

// dialH2 connects to a new hub as its admin, speaking HTTP/2 by hand:
// the client preface and empty SETTINGS are sent, nothing is read yet.
func dialH2(t *testing.T) (conn *tls.Conn, host string) {
	t.Helper()
	h := hubtest.Start(t)
	tlsCfg, err := rest.TLSConfigFor(h.Config)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg.NextProtos = []string{"h2"}
	u, err := url.Parse(h.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	conn, err = tls.Dial("tcp", u.Host, tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q, want h2", p)
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	writeFrame(t, conn, frame{typ: frameSettings})
	return conn, u.Host
}

// A client encodes its first requests on a new connection for HTTP/2's
// initial 4 KiB table, before it has read the hub's SETTINGS: as
// client-go does when a restarted hub's clients open their watches at
// once. The hub must decode them with that table, not close the
// connection with COMPRESSION_ERROR.
func TestHTTP2FirstRequestsUseTheInitialTable(t *testing.T) {
	conn, host := dialH2(t)
	request := append([]byte{0x82, 0x87}, literal(4, "/healthz")...)
	request = append(request, literal(1, host)...)
	// Stream 1 adds three entries of 439 bytes (name, value and 32):
	// 1,317 bytes, past 1 KiB; stream 3 refers to all three, the oldest
	// as dynamic entry 64.
	first := append([]byte{}, request...)
	for _, name := range []string{"x-pad-a", "x-pad-b", "x-pad-c"} {
		first = append(first, indexedLiteral(name, strings.Repeat("v", 400))...)
	}
	second := append(append([]byte{}, request...), 0x80|62, 0x80|63, 0x80|64)
	writeFrame(t, conn, frame{typ: frameHeaders, flags: flagEndStream | flagEndHeaders, stream: 1, payload: first})
	writeFrame(t, conn, frame{typ: frameHeaders, flags: flagEndStream | flagEndHeaders, stream: 3, payload: second})

	answered := map[uint32]bool{}
	for len(answered) < 2 {
		f := readFrame(t, conn)
		switch f.typ {
		case frameSettings:
			if f.flags&flagAck == 0 {
				writeFrame(t, conn, frame{typ: frameSettings, flags: flagAck})
			}
		case frameGoAway:
			code := binary.BigEndian.Uint32(f.payload[4:8])
			t.Fatalf("the hub closed the connection: GOAWAY with error code %#x (9 is COMPRESSION_ERROR), after streams %v", code, answered)
		case frameHeaders:
			answered[f.stream] = true
		}
	}
}

// Every device holds a connection to the hub for as long as it runs: the
// hub announces HPACK tables and frames of the sizes that keep what one
// connection costs small, and encodes its answers with the smaller table.
func TestHTTP2ConnectionSizes(t *testing.T) {
	conn, host := dialH2(t)
	// GET /healthz: :method GET and :scheme https are static entries 2
	// and 7; :path and :authority literals on static names 4 and 1.
	block := append([]byte{0x82, 0x87}, literal(4, "/healthz")...)
	block = append(block, literal(1, host)...)
	writeFrame(t, conn, frame{typ: frameHeaders, flags: flagEndStream | flagEndHeaders, stream: 1, payload: block})

	var settings map[uint16]uint32
	for {
		f := readFrame(t, conn)
		switch {
		case f.typ == frameSettings && f.flags&flagAck == 0:
			settings = map[uint16]uint32{}
			for p := f.payload; len(p) >= 6; p = p[6:] {
				settings[binary.BigEndian.Uint16(p)] = binary.BigEndian.Uint32(p[2:])
			}
			writeFrame(t, conn, frame{typ: frameSettings, flags: flagAck})
			continue
		case f.typ != frameHeaders || f.stream != 1:
			continue
		}
		if settings == nil {
			t.Fatal("the hub answered before sending its SETTINGS")
		}
		if got, ok := settings[settingHeaderTableSize]; ok && got < 4096 {
			t.Errorf("SETTINGS_HEADER_TABLE_SIZE %d: the table decoding requests must keep HTTP/2's initial 4096, which clients encode their first requests for", got)
		}
		if got := settings[settingMaxFrameSize]; got != hub.MaxReadFrameSize {
			t.Errorf("SETTINGS_MAX_FRAME_SIZE %d, want %d", got, hub.MaxReadFrameSize)
		}
		// The client allowed the default 4 KiB table for answers; the
		// hub's encoder takes less and says so first.
		if want := tableSizeUpdate(hub.HeaderTableSize); !bytes.HasPrefix(f.payload, want) {
			t.Errorf("the answer's header block starts % x, want the table size update to %d (% x)", f.payload[:min(len(f.payload), 4)], hub.HeaderTableSize, want)
		}
		return
	}
}
