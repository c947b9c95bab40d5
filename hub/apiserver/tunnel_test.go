package apiserver_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/hubtest"
)

// askTunnel asks the hub for a tunnel by hand, over HTTP/1.1 with cfg's
// certificate, and reads its answer.
func askTunnel(t *testing.T, h *hubtest.Hub, cfg *rest.Config) (*tls.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	tc, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tc.NextProtos = []string{"http/1.1"}
	conn, err := tls.Dial("tcp", strings.TrimPrefix(h.URL(), "https://"), tc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, "GET "+agentapi.PathTunnel+" HTTP/1.1\r\nHost: hub\r\nConnection: Upgrade\r\nUpgrade: "+agentapi.TunnelProtocol+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return conn, br, resp
}

// rawTunnel opens a tunnel by hand with cfg's certificate.
func rawTunnel(t *testing.T, h *hubtest.Hub, cfg *rest.Config) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	conn, br, resp := askTunnel(t, h, cfg)
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != agentapi.TunnelProtocol {
		t.Fatalf("opening a tunnel: %s, Upgrade %q", resp.Status, resp.Header.Get("Upgrade"))
	}
	return conn, br
}

func sendFrame(t *testing.T, conn *tls.Conn, f agentapi.TunnelFrame) {
	t.Helper()
	if _, err := conn.Write(agentapi.AppendTunnelFrame(nil, f)); err != nil {
		t.Fatal(err)
	}
}

func readFrame(t *testing.T, br *bufio.Reader) agentapi.TunnelFrame {
	t.Helper()
	f, _, err := agentapi.ReadTunnelFrame(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestTunnelFrames: the hub's side of a tunnel, frame by frame.
func TestTunnelFrames(t *testing.T) {
	h := hubtest.Start(t)
	conn, br := rawTunnel(t, h, h.Config)

	// A ping is answered with a pong of its id.
	sendFrame(t, conn, agentapi.TunnelFrame{ID: 42, Kind: agentapi.TunnelPing})
	if f := readFrame(t, br); f.Kind != agentapi.TunnelPong || f.ID != 42 {
		t.Fatalf("ping 42 answered with kind %d id %d", f.Kind, f.ID)
	}

	// A request is answered with a head, its body and an end.
	sendFrame(t, conn, agentapi.TunnelFrame{ID: 1, Kind: agentapi.TunnelRequest,
		Payload: []byte("GET /api/v1/namespaces/default HTTP/1.1\r\nHost: hub\r\nAccept: application/json\r\n\r\n")})
	head := readFrame(t, br)
	if head.Kind != agentapi.TunnelHead || head.ID != 1 {
		t.Fatalf("request 1 answered with kind %d id %d", head.Kind, head.ID)
	}
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(head.Payload))), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the head of request 1: %v %v", resp, err)
	}
	var body []byte
	for {
		f := readFrame(t, br)
		if f.ID != 1 {
			t.Fatalf("a frame of request %d, only 1 was sent", f.ID)
		}
		if f.Kind == agentapi.TunnelEnd {
			if len(f.Payload) > 0 {
				t.Fatalf("request 1 ended early: %s", f.Payload)
			}
			break
		}
		if f.Kind != agentapi.TunnelData {
			t.Fatalf("request 1: frame of kind %d after the head", f.Kind)
		}
		body = append(body, f.Payload...)
	}
	if !strings.Contains(string(body), `"name":"default"`) {
		t.Fatalf("request 1's body: %s", body)
	}

	// A watch is served until the device cancels it.
	sendFrame(t, conn, agentapi.TunnelFrame{ID: 2, Kind: agentapi.TunnelRequest,
		Payload: []byte("GET /api/v1/namespaces?watch=true HTTP/1.1\r\nHost: hub\r\nAccept: application/json\r\n\r\n")})
	if f := readFrame(t, br); f.Kind != agentapi.TunnelHead || f.ID != 2 {
		t.Fatalf("watch 2 answered with kind %d id %d", f.Kind, f.ID)
	}
	sendFrame(t, conn, agentapi.TunnelFrame{ID: 2, Kind: agentapi.TunnelCancel})
	for {
		f := readFrame(t, br)
		if f.Kind == agentapi.TunnelEnd && f.ID == 2 {
			break
		}
		if f.Kind != agentapi.TunnelData {
			t.Fatalf("watch 2 after its cancel: frame of kind %d", f.Kind)
		}
	}

	// What is not HTTP/1.1 is answered 400.
	sendFrame(t, conn, agentapi.TunnelFrame{ID: 3, Kind: agentapi.TunnelRequest, Payload: []byte("hello\r\n\r\n")})
	head = readFrame(t, br)
	if !strings.HasPrefix(string(head.Payload), "HTTP/1.1 400 ") {
		t.Fatalf("a request that is not HTTP: %q", head.Payload)
	}
	for readFrame(t, br).Kind != agentapi.TunnelEnd {
	}

	// Too large a request is refused, and the tunnel goes on.
	sendFrame(t, conn, agentapi.TunnelFrame{ID: 5, Kind: agentapi.TunnelRequest, Payload: make([]byte, 4<<20)})
	head = readFrame(t, br)
	if head.ID != 5 || !strings.HasPrefix(string(head.Payload), "HTTP/1.1 413 ") {
		t.Fatalf("a request of 4 MiB: %q", head.Payload)
	}
	for readFrame(t, br).Kind != agentapi.TunnelEnd {
	}
	// So are headers larger than a connection's.
	sendFrame(t, conn, agentapi.TunnelFrame{ID: 6, Kind: agentapi.TunnelRequest,
		Payload: []byte("GET /api/v1/namespaces HTTP/1.1\r\nHost: hub\r\nX-Big: " + strings.Repeat("x", 70<<10) + "\r\n\r\n")})
	head = readFrame(t, br)
	if head.ID != 6 || !strings.HasPrefix(string(head.Payload), "HTTP/1.1 431 ") {
		t.Fatalf("a request with 70 KiB of headers: %q", head.Payload)
	}
	for readFrame(t, br).Kind != agentapi.TunnelEnd {
	}
	sendFrame(t, conn, agentapi.TunnelFrame{ID: 42, Kind: agentapi.TunnelPing})
	if f := readFrame(t, br); f.Kind != agentapi.TunnelPong {
		t.Fatalf("after refused requests, a ping was answered with kind %d", f.Kind)
	}

	// A frame only the hub sends ends the tunnel.
	sendFrame(t, conn, agentapi.TunnelFrame{ID: 4, Kind: agentapi.TunnelHead})
	if _, _, err := agentapi.ReadTunnelFrame(br, nil); !errors.Is(err, io.EOF) {
		t.Fatalf("after a frame of the hub's kind the tunnel reads %v, want EOF", err)
	}
}

// TestTunnelRefusals: a tunnel needs HTTP/1.1's upgrade and a certificate,
// and its requests are authorized as the device's.
func TestTunnelRefusals(t *testing.T) {
	h := hubtest.Start(t)
	// Over HTTP/2 (client-go's transport): 426.
	hc, err := rest.HTTPClientFor(h.Config)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(h.URL() + agentapi.PathTunnel)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Errorf("a tunnel over HTTP/2: %s, want 426", resp.Status)
	}
	// Without a certificate: 401.
	_, _, resp = askTunnel(t, h, rest.AnonymousClientConfig(h.Config))
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a tunnel without a certificate: %s, want 401", resp.Status)
	}

	// A device's tunnel: its requests are the device's.
	dev, br := rawTunnel(t, h, h.NodeConfig("dev1"))
	sendFrame(t, dev, agentapi.TunnelFrame{ID: 1, Kind: agentapi.TunnelRequest,
		Payload: []byte("GET /api/v1/namespaces/kube-system/secrets HTTP/1.1\r\nHost: hub\r\n\r\n")})
	if f := readFrame(t, br); !strings.HasPrefix(string(f.Payload), "HTTP/1.1 403 ") {
		t.Errorf("a device listing secrets through its tunnel: %q, want 403", f.Payload)
	}
}
