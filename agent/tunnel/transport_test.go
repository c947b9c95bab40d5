package tunnel_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/agent/tunnel"
	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/hubtest"
)

// counting counts the requests that reach the transport under the tunnel.
type counting struct {
	base http.RoundTripper
	n    atomic.Int64
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.base.RoundTrip(r)
}

func (c *counting) WrappedRoundTripper() http.RoundTripper { return c.base }

// tunnelClient is a client whose requests go through a tunnel, with what
// passes under it counted.
func tunnelClient(t *testing.T, cfg *rest.Config) (kubernetes.Interface, *counting) {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	under := &counting{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { under.base = rt; return under })
	cfg.Wrap(tunnel.Wrap(nil))
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, under
}

func tunnels(t *testing.T, h *hubtest.Hub) string {
	t.Helper()
	raw, err := h.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "flotilla_apiserver_tunnels ") {
			return strings.TrimPrefix(l, "flotilla_apiserver_tunnels ")
		}
	}
	t.Fatal("no flotilla_apiserver_tunnels in the hub's metrics")
	return ""
}

// TestTunnelCarriesRequests: writes, reads, an answer of many frames and
// a watch, all in one tunnel, authorized as the device; a broken tunnel
// is replaced by the next request.
func TestTunnelCarriesRequests(t *testing.T) {
	h := hubtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, under := tunnelClient(t, h.NodeConfig("dev1"))

	// The device may read Services, and not Secrets it runs no pod for.
	if _, err := cs.CoreV1().Services("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("listing services through the tunnel: %v", err)
	}
	if _, err := cs.CoreV1().Secrets("default").Get(ctx, "nope", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("a secret through the tunnel: %v, want forbidden (the device's own authorization)", err)
	}
	// A Node it registers, and an answer larger than one frame.
	big := strings.Repeat("x", 200<<10)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dev1", Annotations: map[string]string{"big": big}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("registering the node through the tunnel: %v", err)
	}
	got, err := cs.CoreV1().Nodes().Get(ctx, "dev1", metav1.GetOptions{})
	if err != nil || got.Annotations["big"] != big {
		t.Fatalf("reading the node back: %v (annotation of %d bytes)", err, len(got.Annotations["big"]))
	}

	w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=dev1", ResourceVersion: got.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	got.Labels = map[string]string{"node.flotilla.dev/seen": "yes"}
	if _, err := cs.CoreV1().Nodes().Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Modified || ev.Object.(*corev1.Node).Labels["node.flotilla.dev/seen"] != "yes" {
			t.Fatalf("watch through the tunnel: %s %v", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("no watch event through the tunnel")
	}
	w.Stop()

	if n := tunnels(t, h); n != "1" {
		t.Errorf("the hub has %s tunnels open, want 1", n)
	}
	if n := under.n.Load(); n != 0 {
		t.Errorf("%d requests went over the base transport, want none", n)
	}

	// The hub restarts, closing the tunnel; the device's next requests
	// open another.
	h = h.Restart()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := cs.CoreV1().Nodes().Get(ctx, "dev1", metav1.GetOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the tunnel closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := tunnels(t, h); n != "1" {
		t.Errorf("after the tunnel closed the hub has %s tunnels open, want 1", n)
	}
	if n := under.n.Load(); n != 0 {
		t.Errorf("%d requests went over the base transport, want none", n)
	}
}

// TestHubWithoutTunnels: a hub that answers the tunnel with anything but
// 101 gets the device's requests over the base transport.
func TestHubWithoutTunnels(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tunnel/v1" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"default"}}`))
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	cs, under := tunnelClient(t, cfg)
	for range 3 {
		ns, err := cs.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{})
		if err != nil || ns.Name != "default" {
			t.Fatalf("a request to a hub without tunnels: %v", err)
		}
	}
	if n := under.n.Load(); n != 3 {
		t.Errorf("%d requests went over the base transport, want 3", n)
	}
}

// TestSlowReaderEndsItsAnswer: an answer whose reader falls too far behind
// ends with an error and is cancelled on the hub, and the tunnel goes on
// serving the device's other requests.
func TestSlowReaderEndsItsAnswer(t *testing.T) {
	defer tunnel.SetMaxQueued(1 << 20)()
	cancelled := make(chan uint32, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != agentapi.PathTunnel {
			http.NotFound(w, r)
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+agentapi.TunnelProtocol+"\r\n\r\n")
		var mu sync.Mutex
		send := func(f agentapi.TunnelFrame) error {
			mu.Lock()
			defer mu.Unlock()
			_, err := conn.Write(agentapi.AppendTunnelFrame(nil, f))
			return err
		}
		for {
			f, _, err := agentapi.ReadTunnelFrame(conn, nil)
			if err != nil {
				return
			}
			switch f.Kind {
			case agentapi.TunnelCancel:
				cancelled <- f.ID
			case agentapi.TunnelRequest:
				head := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n"
				if err := send(agentapi.TunnelFrame{ID: f.ID, Kind: agentapi.TunnelHead, Payload: []byte(head)}); err != nil {
					return
				}
				if strings.Contains(string(f.Payload), "/flood") {
					// Far more than the reader will take, while it takes nothing.
					go func(id uint32) {
						chunk := make([]byte, 256<<10)
						for range 16 {
							if send(agentapi.TunnelFrame{ID: id, Kind: agentapi.TunnelData, Payload: chunk}) != nil {
								return
							}
						}
					}(f.ID)
					continue
				}
				_ = send(agentapi.TunnelFrame{ID: f.ID, Kind: agentapi.TunnelData, Payload: []byte("ok")})
				_ = send(agentapi.TunnelFrame{ID: f.ID, Kind: agentapi.TunnelEnd})
			}
		}
	}))
	srv.StartTLS()
	defer srv.Close()
	rt := tunnel.New(srv.Client().Transport, nil)
	get := func(path string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return resp
	}
	flood := get("/flood")
	defer flood.Body.Close()
	select {
	case <-cancelled:
	case <-time.After(20 * time.Second):
		t.Fatal("the hub was not told to stop sending an answer nobody reads")
	}
	if _, err := io.ReadAll(flood.Body); !errors.Is(err, tunnel.ErrClosed) {
		t.Errorf("reading the flooded answer: %v, want tunnel.ErrClosed", err)
	}
	resp := get("/other")
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != "ok" {
		t.Errorf("the next request in the tunnel: %q, %v", b, err)
	}
}

// TestBusyHub: a hub that answers the tunnel 503 (busy), 401 or 403 (it
// refuses this device) gives the request that answer (its Status, its
// Retry-After for client-go), and is asked for a tunnel again on the next
// request rather than sent requests over HTTP/2: only an answer saying
// tunnels are not served is a reason to stop asking.
func TestBusyHub(t *testing.T) {
	for _, code := range []int{http.StatusServiceUnavailable, http.StatusUnauthorized, http.StatusForbidden} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			var opens atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == agentapi.PathTunnel {
					opens.Add(1)
					w.Header().Set("Retry-After", "1")
					http.Error(w, "not now", code)
					return
				}
				t.Errorf("%s reached the hub outside a tunnel", r.URL.Path)
			}))
			srv.EnableHTTP2 = true
			srv.StartTLS()
			defer srv.Close()
			rt := tunnel.New(srv.Client().Transport, nil)
			for range 2 {
				req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/nodes", nil)
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != code || resp.Header.Get("Retry-After") != "1" || resp.Request != req {
					t.Errorf("the hub's answer: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
				}
			}
			if n := opens.Load(); n != 2 {
				t.Errorf("the hub was asked for %d tunnels, want 2", n)
			}
		})
	}
}
