package node_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/agent/node"
	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub/hubtest"
)

// proxy forwards TCP connections to whatever address it is pointed at, so
// an agent keeps one hub URL while the test restarts the hub on a new port.
type proxy struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	conns  map[net.Conn]bool
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		go func() {
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				return
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = true, true
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			io.Copy(c, up)
			c.Close()
		}()
	}
}

// retarget points new connections at addr and cuts the open ones.
func (p *proxy) retarget(addr string) {
	p.mu.Lock()
	p.target = addr
	p.mu.Unlock()
	p.cut()
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func testLog() *slog.Logger {
	if os.Getenv("FLOTILLA_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAgainstHub registers a node with a real hub, checks what the hub
// holds, restarts the hub and checks that the lease is renewed again.
func TestAgainstHub(t *testing.T) {
	h := hubtest.Start(t)
	px := newProxy(t, h.Addr().String())
	cfg := rest.CopyConfig(h.Config)
	cfg.Host = "https://" + px.ln.Addr().String()
	// The agent's own client, as the agent reaches the hub.
	client, err := hubclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	n, err := node.New(node.Config{
		Client: client, Name: "edge-1", Labels: map[string]string{"site": "lab"}, NodeIP: "127.0.0.1",
		DataDir: t.TempDir(), AgentVersion: "v1.2.3", RuntimeVersion: "containerd://test", KubeletPort: 10250,
		StatusInterval: 50 * time.Millisecond, LeaseInterval: 50 * time.Millisecond, Log: testLog(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	stats, err := node.HostMachine{}.Stats(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var got *corev1.Node
	waitFor(t, "the node with its status on the hub", 20*time.Second, func() bool {
		got, err = h.Client.CoreV1().Nodes().Get(context.Background(), "edge-1", metav1.GetOptions{})
		return err == nil && len(got.Status.Conditions) >= 4
	})
	if got.Labels["site"] != "lab" || got.Labels[api.LabelHostname] != "edge-1" || got.Labels[api.LabelOS] != "linux" {
		t.Errorf("labels = %v", got.Labels)
	}
	want := node.Capacity(stats, node.DefaultMaxPods)
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
		q, w := got.Status.Capacity[r], want[r]
		if q.Cmp(w) != 0 {
			t.Errorf("capacity %s = %s, want %s", r, q.String(), w.String())
		}
	}
	if q := got.Status.Capacity[corev1.ResourceEphemeralStorage]; q.Sign() <= 0 {
		t.Errorf("ephemeral-storage capacity = %s", q.String())
	}
	if got.Status.NodeInfo.KubeletVersion != "v1.2.3" || got.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
		t.Errorf("nodeInfo %+v, endpoints %+v", got.Status.NodeInfo, got.Status.DaemonEndpoints)
	}

	renewedAfter := func(hc kubernetes.Interface, after time.Time) func() bool {
		return func() bool {
			l, err := hc.CoordinationV1().Leases(api.NamespaceNodeLease).Get(context.Background(), "edge-1", metav1.GetOptions{})
			return err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(after) && *l.Spec.LeaseDurationSeconds == 40
		}
	}
	waitFor(t, "a lease renewal", 20*time.Second, renewedAfter(h.Client, time.Now()))

	// The hub goes away for a while and comes back on another port.
	h.Stop()
	time.Sleep(300 * time.Millisecond) // some failed renewals
	h2 := h.Restart()
	px.retarget(h2.Addr().String())
	waitFor(t, "a lease renewal after the hub restarted", 30*time.Second, renewedAfter(h2.Client, time.Now()))
	// And the agent put its conditions back if the hub touched them.
	waitFor(t, "Ready=True after the restart", 30*time.Second, func() bool {
		got, err := h2.Client.CoreV1().Nodes().Get(context.Background(), "edge-1", metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range got.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	})
}
