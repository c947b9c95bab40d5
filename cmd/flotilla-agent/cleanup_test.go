package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"flotilla.dev/flotilla/agent/cni"
	"flotilla.dev/flotilla/agent/routes"
	"flotilla.dev/flotilla/agent/runtime"
	"flotilla.dev/flotilla/agent/runtime/podns"
	"flotilla.dev/flotilla/registry"
	"flotilla.dev/flotilla/test/testimage"
)

// cleanupFlags parses args for the cleanup command and reads its config.
func cleanupFlags(t *testing.T, args ...string) (cleanupConfig, error) {
	t.Helper()
	cmd := newCleanup()
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	return cleanupConfigOf(cmd)
}

func TestCleanupFlags(t *testing.T) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"cleanup", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"--pods", "--config", "--data-dir", "--containerd-address", "--containerd-namespace", "--cni-conf-dir", "--cni-bin-dir", "--log-dir"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("cleanup --help lacks %s", f)
		}
	}

	// The agent's own config file, with keys only run has, is accepted.
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.yaml")
	os.WriteFile(file, []byte(`node-name: dev-7
kubeconfig: /etc/flotilla/agent.kubeconfig
labels: {site: berlin}
data-dir: /srv/agent
containerd-namespace: shop
cni-bin-dir: [/opt/cni/bin]
registries:
  hosts:
    registry.local:5000: {plainHTTP: true}
`), 0o644)
	cfg, err := cleanupFlags(t, "--config", file, "--cni-conf-dir", "/srv/net.d")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DataDir != "/srv/agent" || cfg.ContainerdNamespace != "shop" || cfg.CNIConfDir != "/srv/net.d" ||
		strings.Join(cfg.CNIBinDirs, ":") != "/opt/cni/bin" || cfg.ContainerdAddress != runtime.DefaultSocket ||
		cfg.LogDir != runtime.DefaultLogDir || cfg.Pods {
		t.Errorf("from the file: %+v", cfg)
	}

	// --pods only from the command line; other keys from the environment.
	t.Setenv("FLOTILLA_PODS", "true")
	t.Setenv("FLOTILLA_CONTAINERD_NAMESPACE", "from-env")
	cfg, err = cleanupFlags(t, "--config", "")
	if err != nil || cfg.Pods || cfg.ContainerdNamespace != "from-env" || cfg.DataDir != "/var/lib/flotilla/agent" {
		t.Errorf("environment: %+v %v", cfg, err)
	}
	cfg, err = cleanupFlags(t, "--config", "", "--pods", "--containerd-namespace", "flag")
	if err != nil || !cfg.Pods || cfg.ContainerdNamespace != "flag" {
		t.Errorf("flags: %+v %v", cfg, err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("data-dir: /x\npods: true\n"), 0o644)
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"pods in the file": {[]string{"--config", bad}, `unknown key "pods"`},
		"missing file":     {[]string{"--config", filepath.Join(dir, "nope.yaml")}, "nope.yaml"},
		"relative dir":     {[]string{"--config", "", "--data-dir", "var/agent"}, "--data-dir"},
	} {
		if _, err := cleanupFlags(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
}

func TestPruneIPAM(t *testing.T) {
	dir := t.TempDir()
	gen := &cni.Config{NetworkName: "flotilla", PodCIDR: "10.42.3.0/24", IPAMDataDir: dir}
	state := filepath.Join(dir, "flotilla")
	write := func(names ...string) {
		os.MkdirAll(state, 0o755)
		for _, n := range names {
			os.WriteFile(filepath.Join(state, n), []byte("x"), 0o644)
		}
	}
	// Another device's reservation keeps the directory; ours go.
	write("lock", "last_reserved_ip.0", "10.42.3.7", "10.42.4.9")
	if removed, err := pruneIPAM(gen); err != nil || removed != "" {
		t.Fatalf("shared: %q %v", removed, err)
	}
	ents, _ := os.ReadDir(state)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "10.42.4.9,last_reserved_ip.0,lock" {
		t.Errorf("left %v", names)
	}
	os.Remove(filepath.Join(state, "10.42.4.9"))
	if removed, err := pruneIPAM(gen); err != nil || removed != state {
		t.Fatalf("alone: %q %v", removed, err)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left: %v", state, err)
	}
	if removed, err := pruneIPAM(gen); err != nil || removed != "" {
		t.Errorf("again: %q %v", removed, err)
	}
}

// inNS runs a command in the network namespace at ns.
func inNS(t *testing.T, ns string, argv ...string) string {
	t.Helper()
	var out []byte
	err := podns.Do(ns, func() error {
		var err error
		out, err = exec.Command(argv[0], argv[1:]...).CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("%v: %v: %s", argv, err, out)
	}
	return string(out)
}

func buildLogger(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), runtime.LoggerBinary)
	cmd := exec.Command("go", "build", "-o", path, "flotilla.dev/flotilla/cmd/flotilla-logger")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build flotilla-logger: %v: %s", err, out)
	}
	return path
}

// TestCleanupRemovesPods runs two pods as the agent does, in a private
// "host" network namespace and a containerd namespace of the test's, and
// checks that cleanup --pods leaves nothing of them.
func TestCleanupRemovesPods(t *testing.T) {
	client, ns := testimage.Containerd(t)
	ctx := context.Background()
	puller, err := registry.NewPuller(client, registry.PullerConfig{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := puller.Pull(ctx, testimage.App(t))
	if err != nil {
		t.Fatal(err)
	}
	logger := buildLogger(t)
	dir := t.TempDir()

	hostNS := filepath.Join(dir, "hostns")
	if err := podns.CreateNet(hostNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { podns.Remove(hostNS) })
	inNS(t, hostNS, "ip", "link", "set", "lo", "up")
	// What the proxy and the routes leave, and a bridge Flotilla did not make.
	inNS(t, hostNS, "iptables", "-t", "nat", "-N", "FLOTILLA-SERVICES")
	inNS(t, hostNS, "iptables", "-t", "nat", "-A", "PREROUTING", "-j", "FLOTILLA-SERVICES")
	inNS(t, hostNS, "ip", "route", "add", "10.42.99.0/24", "dev", "lo", "proto", "241")
	inNS(t, hostNS, "ip", "link", "add", "flt-keep0", "type", "bridge")
	if routes.RouteProtocol != 241 {
		t.Fatalf("routes.RouteProtocol is %d; update the test", routes.RouteProtocol)
	}

	const bridge = "flt-cl0"
	confDir, cacheDir, ipamDir := filepath.Join(dir, "net.d"), filepath.Join(dir, "cni-cache"), filepath.Join(dir, "ipam")
	network, err := cni.New(cni.Config{ConfDir: confDir, CacheDir: cacheDir, IPAMDataDir: ipamDir, PodCIDR: "10.88.7.0/24", BridgeName: bridge})
	if err != nil {
		t.Fatal(err)
	}
	runDir, logDir, dataDir := filepath.Join(dir, "run"), filepath.Join(dir, "logs"), filepath.Join(dir, "data")
	rt, err := runtime.New(runtime.Config{Client: client, Namespace: ns, RunDir: runDir, LogDir: logDir, LoggerPath: logger})
	if err != nil {
		t.Fatal(err)
	}
	// Should the test fail, the pods go the way the kubelet's tests do.
	t.Cleanup(func() {
		cs, _ := rt.ListContainers(ctx, runtime.ListFilter{})
		for _, c := range cs {
			rt.RemoveContainer(ctx, c.ID)
		}
		sbs, _ := rt.ListSandboxes(ctx)
		for _, sb := range sbs {
			podns.Do(hostNS, func() error { return network.Teardown(ctx, sb.ID, sb.NetNS()) })
			rt.RemoveSandbox(ctx, sb.ID)
		}
	})

	pod := func(name string) *runtime.Sandbox {
		sb, err := rt.CreateSandbox(ctx, runtime.SandboxConfig{
			Pod: runtime.PodRef{UID: "uid-" + name, Namespace: "default", Name: name}, Hostname: name,
			DNS: &runtime.DNSConfig{Servers: []string{"10.43.0.10"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		var ip net.IP
		if err := podns.Do(hostNS, func() error {
			ip, err = network.Setup(ctx, sb.ID, sb.NetNS(), cni.Attach{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if err := rt.SetSandboxIP(ctx, sb.ID, ip.String()); err != nil {
			t.Fatal(err)
		}
		return sb
	}
	web := pod("web")
	// A container that ignores SIGTERM: cleanup must not wait for it.
	c, err := rt.CreateContainer(ctx, runtime.ContainerConfig{
		Pod: web.Pod, Name: "app", Image: pulled.Image.Name(), Sandbox: web, Env: []string{"IGNORE_SIGTERM=true"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.StartContainer(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	// A pod whose network namespace is already gone.
	gone := pod("gone")
	if err := podns.Remove(gone.NetNS()); err != nil {
		t.Fatal(err)
	}
	// A volume on a tmpfs, as secrets are.
	secret := filepath.Join(dataDir, "pods", "uid-web", "volumes", "kubernetes.io~secret", "token")
	if err := os.MkdirAll(secret, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", secret, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(secret, unix.MNT_DETACH) })
	os.WriteFile(filepath.Join(secret, "token"), []byte("s3cret"), 0o600)
	if _, err := os.Stat(rt.PodLogDir(web.Pod)); err != nil {
		t.Fatalf("the container has no log dir: %v", err)
	}

	cfg := cleanupConfig{
		Pods: true, DataDir: dataDir, ContainerdAddress: testimage.ContainerdSocket, ContainerdNamespace: ns,
		CNIConfDir: confDir, CNIBinDirs: cni.DefaultBinDirs, LogDir: logDir,
		RunDir: runDir, CNICacheDir: cacheDir, NetNSPath: hostNS,
	}
	var out bytes.Buffer
	if err := cleanupDevice(ctx, cfg, &out); err != nil {
		t.Fatalf("cleanup: %v\n%s", err, out.String())
	}
	t.Logf("cleanup said:\n%s", out.String())
	for _, want := range []string{
		"removed container app (attempt 0) of pod default/web (uid-web)",
		"removed sandbox of pod default/web (uid-web)",
		"removed sandbox of pod default/gone (uid-gone)",
		"removed logs of pod default/web (uid-web)",
		"removed volumes of pod uid-web",
		"removed containerd namespace " + ns,
		"removed bridge " + bridge,
		"removed IPAM state " + filepath.Join(ipamDir, "flotilla"),
		"removed CNI configuration " + filepath.Join(confDir, cni.DefaultConfFile),
		"removed Flotilla's iptables chains and pod routes",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}

	nctx := namespaces.WithNamespace(ctx, ns)
	if cs, err := client.Containers(nctx); err != nil || len(cs) > 0 {
		t.Errorf("containers left: %v %v", cs, err)
	}
	all, err := client.NamespaceService().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range all {
		if n == ns {
			t.Errorf("containerd namespace %s is still there", ns)
		}
	}
	if ents, err := os.ReadDir(filepath.Join(runDir, "sandboxes")); len(ents) > 0 || (err != nil && !errors.Is(err, os.ErrNotExist)) {
		t.Errorf("sandboxes left: %v %v", ents, err)
	}
	for _, p := range []string{rt.PodLogDir(web.Pod), filepath.Join(dataDir, "pods"), filepath.Join(confDir, cni.DefaultConfFile), filepath.Join(ipamDir, "flotilla")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", p, err)
		}
	}
	if err := podns.Do(hostNS, func() error {
		if _, err := netlink.LinkByName(bridge); err == nil {
			t.Errorf("bridge %s left", bridge)
		}
		if _, err := netlink.LinkByName("flt-keep0"); err != nil {
			t.Errorf("the bridge Flotilla did not make was removed: %v", err)
		}
		rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: routes.RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
		if err != nil || len(rs) > 0 {
			t.Errorf("pod routes left: %v %v", rs, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if rules := inNS(t, hostNS, "iptables-save"); strings.Contains(rules, "FLOTILLA") {
		t.Errorf("FLOTILLA rules left:\n%s", rules)
	}

	// Again: nothing left to remove, and no error.
	out.Reset()
	if err := cleanupDevice(ctx, cfg, &out); err != nil {
		t.Fatalf("second cleanup: %v", err)
	}
	if got := strings.TrimSpace(out.String()); got != "removed Flotilla's iptables chains and pod routes" {
		t.Errorf("second cleanup said %q", got)
	}
}
