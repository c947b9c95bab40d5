package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/agent/runtime"
	"flotilla.dev/flotilla/agent/runtime/podns"
	"flotilla.dev/flotilla/hub/auth"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/test/testimage"
)

// testDevice is one device under test: a hub, and an agent in a private
// network namespace on a private containerd namespace, which the test
// starts and stops (agent restarts) as it likes.
type testDevice struct {
	t                          testing.TB
	hub                        *hubtest.Hub
	cfg                        Config
	name, dir, hostNS, ns, img string

	cancel context.CancelFunc
	done   chan error
}

func newTestDevice(t testing.TB, hub ...hubtest.Options) *testDevice {
	t.Helper()
	_, ns := testimage.Containerd(t)
	d := &testDevice{t: t, ns: ns, img: testimage.App(t), dir: t.TempDir()}
	logger := filepath.Join(d.dir, runtime.LoggerBinary)
	build := exec.Command("go", "build", "-o", logger, "flotilla.dev/flotilla/cmd/flotilla-logger")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building flotilla-logger: %v\n%s", err, out)
	}
	// The device's network namespace: the service proxy's rules go there.
	d.hostNS = filepath.Join(d.dir, "hostns")
	if err := podns.CreateNet(d.hostNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { podns.Remove(d.hostNS) })
	// A default route, as a device has one: a connect to a ClusterIP
	// needs a route before the proxy's DNAT rewrites it. It goes into a
	// veth pair whose both ends are in this namespace, so whatever is not
	// rewritten goes nowhere: nothing leaves the namespace.
	for _, args := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", "flt-void0", "type", "veth", "peer", "name", "flt-void1"},
		{"ip", "link", "set", "flt-void0", "up"},
		{"ip", "link", "set", "flt-void1", "up"},
		{"ip", "route", "add", "default", "dev", "flt-void0"},
	} {
		if out, err := exec.Command("nsenter", append([]string{"--net=" + d.hostNS}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	d.hub = hubtest.Start(t, hub...)
	b := make([]byte, 3)
	rand.Read(b)
	d.name = "agent-" + hex.EncodeToString(b)
	d.cfg = Config{
		NodeName: d.name, DataDir: filepath.Join(d.dir, "data"), ContainerdAddress: testimage.ContainerdSocket, ContainerdNamespace: ns,
		Labels: map[string]string{"site": "lab"}, NodeIP: "127.0.0.1", ServerListen: "127.0.0.1:0",
		CNIConfDir: filepath.Join(d.dir, "net.d"), LogDir: filepath.Join(d.dir, "logs"), RunDir: filepath.Join(d.dir, "run"),
		LoggerPath: logger, NetNSPath: d.hostNS, Credentials: KubeconfigCredentials(d.hub.KubeconfigPath(), ""), Log: testLog(t),
		ManifestsDir: filepath.Join(d.dir, "manifests"), TrustDir: filepath.Join(d.dir, "trust"),
	}
	t.Cleanup(d.stop)
	return d
}

// start runs a new agent process's worth of state: nothing carries over
// from an earlier start but the data dir and what containerd holds.
func (d *testDevice) start() {
	d.t.Helper()
	a, err := New(d.cfg)
	if err != nil {
		d.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel, d.done = cancel, make(chan error, 1)
	go func() { d.done <- a.Run(ctx) }()
}

// stop stops the agent (idempotent); containers outlive it.
func (d *testDevice) stop() {
	if d.cancel == nil {
		return
	}
	d.cancel()
	d.cancel = nil
	select {
	case err := <-d.done:
		if err != nil {
			d.t.Errorf("Run: %v", err)
		}
	case <-time.After(60 * time.Second):
		d.t.Error("the agent did not stop within 60s")
	}
}

// assignPodCIDR does what the hub's node lifecycle controller does once
// the agent has registered its Node.
func (d *testDevice) assignPodCIDR(cidr string) {
	d.t.Helper()
	bg := context.Background()
	var n *corev1.Node
	waitFor(d.t, "the node", 60*time.Second, func() bool {
		var err error
		n, err = d.hub.Client.CoreV1().Nodes().Get(bg, d.name, metav1.GetOptions{})
		return err == nil
	})
	n.Spec.PodCIDR, n.Spec.PodCIDRs = cidr, []string{cidr}
	if _, err := d.hub.Client.CoreV1().Nodes().Update(bg, n, metav1.UpdateOptions{}); err != nil {
		d.t.Fatal(err)
	}
}

// deletePod deletes a pod and waits until the agent has stopped it and
// the hub has let it go, so that nothing of it outlives the test.
func (d *testDevice) deletePod(namespace, name string) {
	d.t.Helper()
	bg := context.Background()
	if err := d.hub.Client.CoreV1().Pods(namespace).Delete(bg, name, metav1.DeleteOptions{}); err != nil {
		d.t.Fatal(err)
	}
	waitFor(d.t, "pod "+name+" to be gone", 120*time.Second, func() bool {
		_, err := d.hub.Client.CoreV1().Pods(namespace).Get(bg, name, metav1.GetOptions{})
		return err != nil
	})
}

// pods lists the pods (namespace/name) the device has in containerd, as
// a technician would read them: true when a container of it runs, false
// when only stopped containers or its sandbox remain.
func (d *testDevice) pods() map[string]bool {
	d.t.Helper()
	client, _ := testimage.Containerd(d.t)
	rt, err := runtime.New(runtime.Config{Client: client, Namespace: d.ns, RunDir: d.cfg.RunDir, LogDir: d.cfg.LogDir, LoggerPath: d.cfg.LoggerPath})
	if err != nil {
		d.t.Fatal(err)
	}
	bg := context.Background()
	cs, err := rt.ListContainers(bg, runtime.ListFilter{})
	if err != nil {
		d.t.Fatal(err)
	}
	sbs, err := rt.ListSandboxes(bg)
	if err != nil {
		d.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, sb := range sbs {
		out[sb.Pod.Namespace+"/"+sb.Pod.Name] = false
	}
	for _, c := range cs {
		name := c.Pod.Namespace + "/" + c.Pod.Name
		out[name] = out[name] || c.Status.State == runtime.StateRunning
	}
	return out
}

// runningContainers maps each pod (by name) to the ID of a container of it
// that runs in containerd, what its status on the hub must name.
func (d *testDevice) runningContainers() map[string]string {
	d.t.Helper()
	client, _ := testimage.Containerd(d.t)
	rt, err := runtime.New(runtime.Config{Client: client, Namespace: d.ns, RunDir: d.cfg.RunDir, LogDir: d.cfg.LogDir, LoggerPath: d.cfg.LoggerPath})
	if err != nil {
		d.t.Fatal(err)
	}
	cs, err := rt.ListContainers(context.Background(), runtime.ListFilter{})
	if err != nil {
		d.t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range cs {
		if c.Status.State == runtime.StateRunning {
			out[c.Pod.Name] = c.ID
		}
	}
	return out
}

// writeStaticPod drops a host-network pod that sleeps into the device's
// manifests dir.
func (d *testDevice) writeStaticPod(name string) string {
	d.t.Helper()
	if err := os.MkdirAll(d.cfg.ManifestsDir, 0o755); err != nil {
		d.t.Fatal(err)
	}
	path := filepath.Join(d.cfg.ManifestsDir, name+".yaml")
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: default
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: %s
    args: [sleep, 1h]
`, name, d.img)
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		d.t.Fatal(err)
	}
	return path
}

// powerCut leaves the device as a reboot would: every container process
// gone, /run (the agent's run dir: sandboxes, network namespaces) empty,
// no iptables rules and no pod bridge. The disk (data dir, containerd's
// content and records) stays.
func (d *testDevice) powerCut() {
	d.t.Helper()
	client, _ := testimage.Containerd(d.t)
	ctx := namespaces.WithNamespace(context.Background(), d.ns)
	ctrs, err := client.Containers(ctx)
	if err != nil {
		d.t.Fatal(err)
	}
	for _, c := range ctrs {
		task, err := c.Task(ctx, nil)
		if err != nil {
			continue
		}
		if _, err := task.Delete(ctx, containerd.WithProcessKill); err != nil {
			d.t.Fatalf("killing %s: %v", c.ID(), err)
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		d.t.Fatal(err)
	}
	var mounts []string
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], d.cfg.RunDir+"/") {
			mounts = append(mounts, f[4])
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			d.t.Fatalf("unmounting %s: %v", m, err)
		}
	}
	if err := os.RemoveAll(d.cfg.RunDir); err != nil {
		d.t.Fatal(err)
	}
	for _, args := range [][]string{
		{"iptables", "-t", "nat", "-F"}, {"iptables", "-t", "nat", "-X"},
		{"iptables", "-t", "filter", "-F"}, {"iptables", "-t", "filter", "-X"},
		{"ip", "link", "delete", "flotilla0"},
	} {
		if out, err := exec.Command("nsenter", append([]string{"--net=" + d.hostNS}, args...)...).CombinedOutput(); err != nil && args[0] == "iptables" {
			d.t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
}

// get asks url from inside the device's network namespace. The
// connection is dialled there (the transport's own goroutines would dial
// from the test's namespace), so nothing ever leaves this machine.
func (d *testDevice) get(url string) (string, error) {
	tr := &http.Transport{DisableKeepAlives: true, Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := podns.Do(d.hostNS, func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Timeout: 2 * time.Second, Transport: tr}).Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// resolve asks the cluster DNS server at server (host:port) for name's A
// record from inside the device's network namespace; "" when it gives
// no single answer.
func (d *testDevice) resolve(server, name string) string {
	var got string
	podns.Do(d.hostNS, func() error {
		m := new(mdns.Msg)
		m.SetQuestion(name, mdns.TypeA)
		r, _, err := (&mdns.Client{Timeout: time.Second}).Exchange(m, server)
		if err == nil && len(r.Answer) == 1 {
			if a, ok := r.Answer[0].(*mdns.A); ok {
				got = a.A.String()
			}
		}
		return nil
	})
	return got
}

// sleeper creates a pod bound to the device that runs image and sleeps,
// on the host's network (mod may change it), and returns it.
func (d *testDevice) sleeper(name, image string, mod func(*corev1.Pod)) *corev1.Pod {
	d.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: d.name, HostNetwork: true, TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "app", Image: image, Args: []string{"sleep", "1h"}}}},
	}
	if mod != nil {
		mod(p)
	}
	created, err := d.hub.Client.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		d.t.Fatal(err)
	}
	return created
}

// webServer makes a sleeper a web server on the pod network (the test app
// serves on 8080 with no arguments), labelled app=web.
func webServer(p *corev1.Pod) {
	p.Labels = map[string]string{"app": "web"}
	p.Spec.HostNetwork = false
	p.Spec.Containers[0].Args = nil
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
}

// webService creates the Service web, port 80 to the app=web pods' 8080.
func (d *testDevice) webService() *corev1.Service {
	d.t.Helper()
	svc, err := d.hub.Client.CoreV1().Services("default").Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		d.t.Fatal(err)
	}
	return svc
}

// asNode makes the agent talk to the hub as its device does, with a node
// certificate (the hub's node restrictions apply), instead of the admin
// kubeconfig; the Node gets no labels a device may not set itself.
func (d *testDevice) asNode() {
	d.t.Helper()
	cert, key, err := d.hub.PKI().IssueClientCert("system:node:"+d.name, []string{auth.GroupNodes}, 24*time.Hour)
	if err != nil {
		d.t.Fatal(err)
	}
	ca := d.hub.PKI().CACertPEM()
	url := d.hub.URL()
	d.cfg.Labels = nil
	d.cfg.Credentials = func(context.Context) (*rest.Config, error) {
		return &rest.Config{Host: url, TLSClientConfig: rest.TLSClientConfig{CAData: ca, CertData: cert, KeyData: key}, QPS: 50, Burst: 100}, nil
	}
}
