package cni

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"flotilla.dev/flotilla/agent/runtime/podns"
	"flotilla.dev/flotilla/internal/testenv"
)

// testHost is a private network namespace standing in for the device, so
// bridges and iptables rules never touch the machine's own network.
type testHost struct {
	cfg     Config
	hostNS  string
	dataDir string
}

func newTestHost(t *testing.T) *testHost {
	t.Helper()
	testenv.RequireRoot(t, "CNI tests create namespaces and bridges")
	testenv.RequireCNI(t, DefaultBinDirs)
	testenv.RequireTool(t, "iptables", "scripts/install-deps.sh installs it")
	dir := t.TempDir()
	h := &testHost{hostNS: filepath.Join(dir, "ns", "host"), dataDir: filepath.Join(dir, "ipam")}
	if err := podns.CreateNet(h.hostNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { podns.Remove(h.hostNS) })
	h.cfg = Config{
		ConfDir:     filepath.Join(dir, "net.d"),
		CacheDir:    filepath.Join(dir, "cache"),
		IPAMDataDir: h.dataDir,
		PodCIDR:     "10.244.77.0/24",
		BridgeName:  "flt-test0",
	}
	return h
}

func (h *testHost) newPod(t *testing.T, name string) string {
	p := filepath.Join(filepath.Dir(h.hostNS), name)
	if err := podns.CreateNet(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { podns.Remove(p) })
	return p
}

func (h *testHost) natRules(t *testing.T) string {
	t.Helper()
	var out []byte
	err := podns.Do(h.hostNS, func() error {
		var err error
		out, err = exec.Command("iptables", "-w", "-t", "nat", "-S").CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("iptables: %v: %s", err, out)
	}
	return string(out)
}

func TestSetupTeardownInPrivateHost(t *testing.T) {
	h := newTestHost(t)
	ctx := context.Background()
	pod := h.newPod(t, "pod1")
	nw, err := New(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ip net.IP
	if err := podns.Do(h.hostNS, func() error {
		var err error
		ip, err = nw.Setup(ctx, "pod1-uid", pod, Attach{Ports: []PortMapping{{HostPort: 18080, ContainerPort: 8080, Protocol: "TCP"}}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	_, cidr, _ := net.ParseCIDR(h.cfg.PodCIDR)
	if !cidr.Contains(ip) || ip.Equal(net.ParseIP("10.244.77.1")) {
		t.Fatalf("pod IP %s outside %s or the gateway", ip, cidr)
	}

	// Inside the pod: lo is up, eth0 has the IP; a server there answers
	// from the host over the bridge.
	var ln net.Listener
	if err := podns.Do(pod, func() error {
		lo, err := net.InterfaceByName("lo")
		if err != nil || lo.Flags&net.FlagUp == 0 {
			return errors.New("lo is not up in the pod")
		}
		var err2 error
		ln, err2 = net.Listen("tcp", ip.String()+":8080")
		return err2
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.WriteString(c, "hello from pod\n")
			c.Close()
		}
	}()
	var got []byte
	if err := podns.Do(h.hostNS, func() error {
		c, err := net.Dial("tcp", ip.String()+":8080")
		if err != nil {
			return err
		}
		defer c.Close()
		got, err = io.ReadAll(c)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if string(got) != "hello from pod\n" {
		t.Fatalf("from pod: %q", got)
	}

	rules := h.natRules(t)
	if !strings.Contains(rules, "--dport 18080") || len(podChains(rules)) < 1 {
		t.Fatalf("hostPort DNAT chain missing:\n%s", rules)
	}
	lease := filepath.Join(h.dataDir, "flotilla", ip.String())
	if _, err := os.Stat(lease); err != nil {
		t.Fatalf("host-local lease: %v", err)
	}

	// A new Network, as after an agent restart, tears the pod down using
	// the cached attachment; a second teardown is harmless.
	nw2, err := New(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := podns.Do(h.hostNS, func() error { return nw2.Teardown(ctx, "pod1-uid", pod) }); err != nil {
			t.Fatalf("teardown %d: %v", i, err)
		}
	}
	rules = h.natRules(t)
	if strings.Contains(rules, "--dport 18080") || len(podChains(rules)) > 0 {
		t.Fatalf("pod rules left after teardown:\n%s", rules)
	}
	if _, err := os.Stat(lease); !os.IsNotExist(err) {
		t.Fatalf("IP lease left after teardown: %v", err)
	}
	if err := podns.Do(pod, func() error {
		if _, err := net.InterfaceByName("eth0"); err == nil {
			return errors.New("eth0 still in the pod")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestSetupWithoutNetNS(t *testing.T) {
	h := newTestHost(t)
	nw, err := New(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = nw.Setup(context.Background(), "gone", filepath.Join(t.TempDir(), "missing"), Attach{})
	if !errors.Is(err, ErrNoNetNS) {
		t.Fatalf("err = %v, want ErrNoNetNS", err)
	}
	// Teardown of a pod whose namespace is gone still succeeds.
	if err := podns.Do(h.hostNS, func() error { return nw.Teardown(context.Background(), "gone", "/nonexistent") }); err != nil {
		t.Fatal(err)
	}
}

// podChains are the per-pod chains CNI made (masquerade CNI-<hash>, portmap
// CNI-DN-<hash>); the shared CNI-HOSTPORT-* chains stay by design.
func podChains(rules string) []string {
	var out []string
	for _, l := range strings.Split(rules, "\n") {
		if strings.HasPrefix(l, "-N CNI-") && !strings.HasPrefix(l, "-N CNI-HOSTPORT-") {
			out = append(out, strings.TrimPrefix(l, "-N "))
		}
	}
	return out
}

// TestSetupKeepsRequestedIP is the reboot case: the pod's old sandbox is
// gone without a teardown, the agent releases the stale reservation and
// asks for the address the pod had, which other devices still route to.
func TestSetupKeepsRequestedIP(t *testing.T) {
	h := newTestHost(t)
	ctx := context.Background()
	nw, err := New(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := net.ParseIP("10.244.77.42").To4()
	setup := func(pod string, at Attach) (ip net.IP, err error) {
		err = podns.Do(h.hostNS, func() error {
			ip, err = nw.Setup(ctx, "pod2-uid", pod, at)
			return err
		})
		return ip, err
	}
	ip, err := setup(h.newPod(t, "before"), Attach{IP: want})
	if err != nil || !ip.Equal(want) {
		t.Fatalf("Setup asking for %s = %s, %v", want, ip, err)
	}
	// A new namespace for the same pod, as after a reboot; the old
	// reservation is released first, as the kubelet does.
	after := h.newPod(t, "after")
	if err := podns.Do(h.hostNS, func() error { return nw.Teardown(ctx, "pod2-uid", "") }); err != nil {
		t.Fatal(err)
	}
	ip, err = setup(after, Attach{IP: want})
	if err != nil || !ip.Equal(want) {
		t.Fatalf("after the reboot Setup = %s, %v; want the same %s", ip, err, want)
	}
	podns.Do(h.hostNS, func() error { return nw.Teardown(ctx, "pod2-uid", after) })
}
