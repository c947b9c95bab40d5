package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"flotilla.dev/flotilla/agent/hubclient/fromclientset"
	"flotilla.dev/flotilla/agent/proxy/netnstest"
)

// A device (netns "node") with a pod bridge 10.42.1.1/24 and three backend
// pods, a client pod on the same bridge, and an "outside" host on
// 192.168.77.0/24 that reaches the device's address 192.168.77.1.
type testNet struct {
	node, outside, client *netnstest.NS
	pods                  []*netnstest.NS
	podIPs                []string
}

const nodeIP = "192.168.77.1"

func newTestNet(t *testing.T) *testNet {
	t.Helper()
	n := &testNet{node: netnstest.New(t, "flt-node"), outside: netnstest.New(t, "flt-out")}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(n.node.Sysctl("net.ipv4.ip_forward", "1"))
	must(n.node.Bridge("flotilla0", "10.42.1.1/24"))
	must(netnstest.Veth(n.node, "uplink", nodeIP+"/24", n.outside, "eth0", "192.168.77.2/24"))
	must(n.outside.IP("route", "add", "10.43.0.0/16", "via", nodeIP))
	// Devices have a default route; the service CIDR needs one to be
	// routable before the DNAT (and to reject when there is none).
	must(n.node.IP("route", "add", "default", "via", "192.168.77.2"))
	for i := range 3 {
		ip := fmt.Sprintf("10.42.1.%d", 11+i)
		p, err := netnstest.Pod(n.node, "flotilla0", fmt.Sprintf("veth%d", i), ip+"/24", "10.42.1.1")
		must(err)
		t.Cleanup(func() { _ = p.Delete() })
		n.pods = append(n.pods, p)
		n.podIPs = append(n.podIPs, ip)
		serveBackend(t, p, fmt.Sprintf("pod%d", i), ip)
	}
	c, err := netnstest.Pod(n.node, "flotilla0", "vethc", "10.42.1.20/24", "10.42.1.1")
	must(err)
	t.Cleanup(func() { _ = c.Delete() })
	n.client = c
	return n
}

// serveBackend answers HTTP on ip:8080 with "name remote-address" and UDP
// on ip:5353 with name.
func serveBackend(t *testing.T, p *netnstest.NS, name, ip string) {
	l, err := p.Listen("tcp", ip+":8080")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", name, r.RemoteAddr)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	pc, err := p.ListenPacket("udp", ip+":5353")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 512)
		for {
			_, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(name), addr)
		}
	}()
	t.Cleanup(func() { _ = pc.Close() })
}

// get makes one HTTP request over a new connection from inside ns and
// returns "backend remote-address".
func get(ctx context.Context, from *netnstest.NS, addr string) (string, error) {
	tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
		return from.Dial(ctx, network, a)
	}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func backendsSeen(t *testing.T, from *netnstest.NS, addr string, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for range n {
		got, err := get(context.Background(), from, addr)
		if err != nil {
			t.Fatalf("GET %s: %v", addr, err)
		}
		name, _, _ := strings.Cut(got, " ")
		seen[name]++
	}
	return seen
}

func udpAsk(from *netnstest.NS, addr string) (string, error) {
	c, err := from.Dial(context.Background(), "udp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("hi")); err != nil {
		return "", err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

// countingIPTables counts restores of a real IPTables.
type countingIPTables struct {
	IPTables
	mu       sync.Mutex
	restores int
}

func (c *countingIPTables) Restore(ctx context.Context, data []byte) error {
	c.mu.Lock()
	c.restores++
	c.mu.Unlock()
	return c.IPTables.Restore(ctx, data)
}

func (c *countingIPTables) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.restores
}

type running struct {
	p      *Proxier
	ipt    *countingIPTables
	syncs  chan SyncResult
	cancel context.CancelFunc
	done   chan error
}

func startProxier(t *testing.T, tn *testNet, mode string, client *fake.Clientset) *running {
	t.Helper()
	var sys *SystemIPTables
	if err := tn.node.Do(func() error { var err error; sys, err = System(mode); return err }); err != nil {
		t.Fatal(err)
	}
	r := &running{ipt: &countingIPTables{IPTables: sys}, syncs: make(chan SyncResult, 1000), done: make(chan error, 1)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("FLOTILLA_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	p, err := New(Config{NodeName: "dev-a", NodeIP: nodeIP, Client: fromclientset.New(client), IPTables: r.ipt,
		NetNSPath: tn.node.Path, MinSyncInterval: 10 * time.Millisecond, Log: log,
		OnSync: func(res SyncResult) {
			select {
			case r.syncs <- res:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	r.p = p
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- p.Run(ctx) }()
	t.Cleanup(r.stop)
	select {
	case res := <-r.syncs:
		if res.Err != nil {
			t.Fatalf("first sync: %v", res.Err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the proxier did not sync")
	}
	return r
}

func (r *running) stop() {
	if r.cancel != nil {
		r.cancel()
		<-r.done
		r.cancel = nil
	}
}

func save(t *testing.T, n *netnstest.NS, mode string) string {
	t.Helper()
	cmd := "iptables-nft-save"
	if mode == ModeLegacy {
		cmd = "iptables-legacy-save"
	}
	out, err := n.Exec(context.Background(), cmd)
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") {
			continue
		}
		// Built-in chains' counters move with any packet.
		if strings.HasPrefix(l, ":") {
			l = counters.ReplaceAllString(l, "[0:0]")
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

func TestIntegration(t *testing.T) {
	netnstest.Skip(t, "iptables-nft-restore", "iptables-legacy-restore", "conntrack")
	for _, mode := range []string{ModeNFT, ModeLegacy} {
		t.Run(mode, func(t *testing.T) { testIntegration(t, mode) })
	}
}

func testIntegration(t *testing.T, mode string) {
	tn := newTestNet(t)
	tcp := []port{{name: "http", port: 8080}}
	web := service("default", "web", "10.43.0.10", port{name: "http", port: 80, nodePort: 30080})
	webSl := endpointSlice("default", "web", "web-1", tcp,
		ep{ip: tn.podIPs[0], node: "dev-a"}, ep{ip: tn.podIPs[1], node: "dev-a"}, ep{ip: tn.podIPs[2], node: "dev-a"})
	empty := service("default", "empty", "10.43.0.11", port{name: "http", port: 80})
	dns := service("default", "dns", "10.43.0.12", port{name: "dns", proto: corev1.ProtocolUDP, port: 53})
	dnsSl := endpointSlice("default", "dns", "dns-1", []port{{name: "dns", proto: corev1.ProtocolUDP, port: 5353}}, ep{ip: tn.podIPs[0], node: "dev-a"})
	sticky := service("default", "sticky", "10.43.0.13", port{name: "http", port: 80})
	sticky.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	stickySl := endpointSlice("default", "sticky", "sticky-1", tcp,
		ep{ip: tn.podIPs[0]}, ep{ip: tn.podIPs[1]}, ep{ip: tn.podIPs[2]})
	local := service("default", "kiosk", "10.43.0.14", port{name: "http", port: 80, nodePort: 30081})
	local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	localSl := endpointSlice("default", "kiosk", "kiosk-1", tcp, ep{ip: tn.podIPs[2], node: "dev-a"}, ep{ip: "10.42.9.9", node: "dev-b"})
	client := fake.NewClientset([]runtime.Object{web, webSl, empty, dns, dnsSl, sticky, stickySl, local, localSl}...)
	r := startProxier(t, tn, mode, client)
	ctx := context.Background()

	t.Run("ClusterIPReachesEveryBackend", func(t *testing.T) {
		for _, from := range []*netnstest.NS{tn.outside, tn.client, tn.node} {
			seen := backendsSeen(t, from, "10.43.0.10:80", 45)
			t.Logf("from %s: %v", from.Name, seen)
			if len(seen) != 3 {
				t.Errorf("from %s: backends %v, want all three", from.Name, seen)
			}
		}
	})
	t.Run("Hairpin", func(t *testing.T) {
		// A backend reaching its own service, possibly itself.
		seen := backendsSeen(t, tn.pods[0], "10.43.0.10:80", 30)
		if seen["pod0"] == 0 || len(seen) != 3 {
			t.Errorf("pod0 through its own service reached %v, want every backend, itself too", seen)
		}
	})
	t.Run("NoEndpointsRefused", func(t *testing.T) {
		for _, from := range []*netnstest.NS{tn.outside, tn.client, tn.node} {
			_, err := from.Dial(ctx, "tcp", "10.43.0.11:80")
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("from %s: dial a service without endpoints: %v, want connection refused", from.Name, err)
			}
		}
	})
	t.Run("NodePortFromOutside", func(t *testing.T) {
		seen := map[string]bool{}
		for range 30 {
			got, err := get(ctx, tn.outside, nodeIP+":30080")
			if err != nil {
				t.Fatal(err)
			}
			name, remote, _ := strings.Cut(got, " ")
			seen[name] = true
			if !strings.HasPrefix(remote, "10.42.1.1:") {
				t.Fatalf("NodePort traffic reached %s from %s, want masqueraded to the bridge address", name, remote)
			}
		}
		if len(seen) != 3 {
			t.Errorf("NodePort backends %v, want all three", seen)
		}
	})
	t.Run("NodePortLocalKeepsClientAddress", func(t *testing.T) {
		for range 10 {
			got, err := get(ctx, tn.outside, nodeIP+":30081")
			if err != nil {
				t.Fatal(err)
			}
			if name, remote, _ := strings.Cut(got, " "); name != "pod2" || !strings.HasPrefix(remote, "192.168.77.2:") {
				t.Fatalf("Local NodePort: %q, want pod2 (the only local endpoint) seeing the client's own address", got)
			}
		}
	})
	t.Run("SessionAffinity", func(t *testing.T) {
		if seen := backendsSeen(t, tn.outside, "10.43.0.13:80", 15); len(seen) != 1 {
			t.Errorf("ClientIP affinity: one client reached %v", seen)
		}
	})
	t.Run("UDP", func(t *testing.T) {
		got, err := udpAsk(tn.outside, "10.43.0.12:53")
		if err != nil || got != "pod0" {
			t.Fatalf("UDP through the service: %q, %v", got, err)
		}
	})
	t.Run("UDPFlowsOfRemovedEndpointFlushed", func(t *testing.T) {
		if _, err := udpAsk(tn.outside, "10.43.0.12:53"); err != nil {
			t.Fatal(err)
		}
		flows := func() string {
			out, _ := tn.node.Exec(ctx, "conntrack", "-L", "-p", "udp", "--orig-dst", "10.43.0.12")
			return string(out)
		}
		if !strings.Contains(flows(), "src="+tn.podIPs[0]) {
			t.Fatalf("no conntrack entry for the UDP flow:\n%s", flows())
		}
		sl := dnsSl.DeepCopy()
		sl.Endpoints[0].Addresses = []string{tn.podIPs[1]}
		if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		for start := time.Now(); strings.Contains(flows(), "src="+tn.podIPs[0]); time.Sleep(5 * time.Millisecond) {
			if time.Since(start) > 10*time.Second {
				t.Fatalf("the flow to the removed endpoint is still tracked:\n%s", flows())
			}
		}
		if got, err := udpAsk(tn.outside, "10.43.0.12:53"); err != nil || got != "pod1" {
			t.Errorf("UDP after the endpoint moved: %q, %v", got, err)
		}
	})
	t.Run("ReadinessLossLeavesRules", func(t *testing.T) {
		sl := webSl.DeepCopy()
		sl.Endpoints[2].Conditions.Ready = ptr(false)
		start := time.Now()
		if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		for strings.Contains(save(t, tn.node, mode), "default/web:http -> "+tn.podIPs[2]+":8080") {
			if time.Since(start) > 10*time.Second {
				t.Fatal("the unready endpoint is still in the rules after 10 s")
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("endpoint left the rules %v after the EndpointSlice update", time.Since(start).Round(time.Millisecond))
		if seen := backendsSeen(t, tn.outside, "10.43.0.10:80", 30); seen["pod2"] > 0 || len(seen) != 2 {
			t.Errorf("after readiness loss: %v", seen)
		}
	})
	t.Run("RestartRewritesNothing", func(t *testing.T) {
		r.stop()
		before := save(t, tn.node, mode)
		r2 := startProxier(t, tn, mode, client)
		if n := r2.ipt.count(); n != 0 {
			t.Errorf("the restarted proxier ran iptables-restore %d times", n)
		}
		if after := save(t, tn.node, mode); after != before {
			t.Errorf("tables changed across a restart:\n%s", lineDiff(before, after))
		}
		r2.stop()
	})
	t.Run("Cleanup", func(t *testing.T) {
		err := tn.node.Do(func() error {
			sys, err := System(mode)
			if err != nil {
				return err
			}
			return CleanupWith(ctx, sys)
		})
		if err != nil {
			t.Fatal(err)
		}
		if s := save(t, tn.node, mode); strings.Contains(s, "FLOTILLA") {
			t.Errorf("left after cleanup:\n%s", s)
		}
	})
}
