package routes

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/agent/hubclient/fromclientset"
	"flotilla.dev/flotilla/agent/proxy"
	"flotilla.dev/flotilla/agent/proxy/netnstest"
	"flotilla.dev/flotilla/api"
)

func node(name, ip, cidr string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}},
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	c := fake.NewClientset()
	for _, cfg := range []Config{{Client: fromclientset.New(c)}, {NodeName: "a"}, {NodeName: "a", Client: fromclientset.New(c), ClusterCIDR: "x"}} {
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
}

// TestRoutesFollowNodes runs the router in a device namespace on a
// segment 192.168.77.0/24 and checks the routes as Nodes come and go.
func TestRoutesFollowNodes(t *testing.T) {
	netnstest.Skip(t, "iptables")
	dev := netnstest.New(t, "flt-dev")
	peer := netnstest.New(t, "flt-peer")
	if err := netnstest.Veth(dev, "eth0", "192.168.77.1/24", peer, "eth0", "192.168.77.2/24"); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(
		node("dev-a", "192.168.77.1", "10.42.1.0/24"),
		node("dev-b", "192.168.77.2", "10.42.2.0/24"),
		node("far", "10.99.0.5", "10.42.9.0/24"), // not on the segment
	)
	var ipt *proxy.SystemIPTables
	if err := dev.Do(func() error { var err error; ipt, err = proxy.System(""); return err }); err != nil {
		t.Fatal(err)
	}
	synced := make(chan error, 100)
	r, err := New(Config{NodeName: "dev-a", Client: fromclientset.New(client), IPTables: ipt, NetNSPath: dev.Path,
		OnSync: func(err error) { synced <- err }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	routes := func() string {
		out, err := dev.Exec(ctx, "ip", "route", "show", "proto", "241")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	waitFor := func(what string, cond func(string) bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(routes()); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: routes are %q", what, routes())
			}
		}
	}
	waitFor("dev-b's pod CIDR via its InternalIP", func(s string) bool { return s == "10.42.2.0/24 via 192.168.77.2 dev eth0" })

	if _, err := client.CoreV1().Nodes().Create(ctx, node("dev-c", "192.168.77.3", "10.42.3.0/24"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("a new device's route", func(s string) bool { return strings.Contains(s, "10.42.3.0/24 via 192.168.77.3") })
	if err := client.CoreV1().Nodes().Delete(ctx, "dev-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("a removed device's route gone", func(s string) bool { return s == "10.42.3.0/24 via 192.168.77.3 dev eth0" })

	out, err := dev.Exec(ctx, "iptables-save")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"-A POSTROUTING -m comment --comment \"flotilla pod egress\" -j FLOTILLA-EGRESS",
		"-A FLOTILLA-EGRESS -s 10.42.0.0/16 -d 10.42.0.0/16 -m comment --comment \"pod to pod keeps its address\" -j RETURN",
		"-A FORWARD -m comment --comment \"flotilla pod network\" -j FLOTILLA-POD-FORWARD",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	// Cleanup removes the routes (in the device's namespace).
	if err := dev.Do(func() error { return Cleanup(ctx) }); err != nil {
		t.Fatal(err)
	}
	if s := routes(); s != "" {
		t.Errorf("routes left after Cleanup: %q", s)
	}
}

// TestEgressFollowsTheAnnouncedPodNetwork: the egress rules keep pod to
// pod traffic unmasqueraded across every range the hub announces on the
// device's Node, and use the configured network while it announces none.
func TestEgressFollowsTheAnnouncedPodNetwork(t *testing.T) {
	n := node("dev-a", "192.168.77.1", "10.64.3.0/24")
	client := fake.NewClientset(n)
	r, err := New(Config{NodeName: "dev-a", Client: fromclientset.New(client), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), r.hasSynced) {
		t.Fatal("nodes did not sync")
	}
	nat := func() string { return strings.Join(r.egressRules()[[2]string{"nat", ChainEgress}], "\n") }
	if got := nat(); !strings.Contains(got, "-s 10.42.0.0/16 -d 10.42.0.0/16") || strings.Contains(got, "10.64.0.0/10") {
		t.Errorf("without an announcement, the egress rules are\n%s\nwant the configured 10.42.0.0/16 only", got)
	}
	n.Annotations = map[string]string{api.AnnotationClusterCIDRs: api.ClusterCIDRs}
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(nat(), "-s 10.64.0.0/10 -d 10.42.0.0/16"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the announced ranges were not followed:\n%s", nat())
		}
	}
	got := nat()
	for _, want := range []string{"-s 10.42.0.0/16 -d 10.64.0.0/10", "-s 10.64.0.0/10 -d 10.64.0.0/10", "-s 10.64.0.0/10 -m comment --comment \"pod traffic leaving"} {
		if !strings.Contains(got, want) {
			t.Errorf("egress rules lack %q:\n%s", want, got)
		}
	}
	fwd := strings.Join(r.egressRules()[[2]string{"filter", ChainPodForward}], "\n")
	if !strings.Contains(fwd, "-d 10.64.0.0/10") {
		t.Errorf("forward rules lack the second range:\n%s", fwd)
	}
}

// TestRoutesStayOnTheSite: pod routes go to the devices of this device's
// site only; devices without a site are one site together.
func TestRoutesStayOnTheSite(t *testing.T) {
	zoned := func(n *corev1.Node, zone string) *corev1.Node {
		if zone != "" {
			n.Labels = map[string]string{api.LabelZone: zone}
		}
		return n
	}
	nodes := []*corev1.Node{
		zoned(node("kiosk-1", "192.168.1.11", "10.42.1.0/24"), "shop-a"),
		zoned(node("kiosk-2", "192.168.1.12", "10.42.2.0/24"), "shop-a"),
		zoned(node("till-1", "192.168.2.11", "10.64.0.0/24"), "shop-b"),
		node("lab-1", "192.168.9.11", "10.42.9.0/24"),
		node("lab-2", "192.168.9.12", "10.42.10.0/24"),
	}
	for _, tc := range []struct{ self, want string }{
		{"kiosk-1", "10.42.2.0/24 via 192.168.1.12"},
		{"till-1", ""},
		{"lab-1", "10.42.10.0/24 via 192.168.9.12"},
		{"unknown", "10.42.10.0/24 via 192.168.9.12,10.42.9.0/24 via 192.168.9.11"},
	} {
		var got []string
		for cidr, gw := range routesTo(nodes, tc.self) {
			got = append(got, cidr+" via "+gw.String())
		}
		slices.Sort(got)
		if s := strings.Join(got, ","); s != tc.want {
			t.Errorf("%s: routes %q, want %q", tc.self, s, tc.want)
		}
	}
}
