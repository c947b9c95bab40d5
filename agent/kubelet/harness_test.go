package kubelet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"flotilla.dev/flotilla/agent/cni"
	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/agent/runtime"
	"flotilla.dev/flotilla/agent/runtime/logdriver"
	"flotilla.dev/flotilla/agent/runtime/podns"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/internal/testenv"
	"flotilla.dev/flotilla/registry"
	"flotilla.dev/flotilla/test/testimage"
)

var loggerPath string

func TestMain(m *testing.M) {
	code := func() int {
		flag.Parse()
		if os.Geteuid() != 0 || testing.Short() {
			// Integration tests skip themselves; unit tests need no logger.
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "flotilla-kubelet-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		loggerPath = filepath.Join(dir, runtime.LoggerBinary)
		cmd := exec.Command("go", "build", "-o", loggerPath, "flotilla.dev/flotilla/cmd/flotilla-logger")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build flotilla-logger: %v: %s\n", err, out)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// agent is one device under test: a hub, a kubelet on a private
// containerd namespace, and a private "host" network namespace with the
// CNI bridge in it.
type agent struct {
	t      testing.TB
	hub    *hubtest.Hub
	rt     *runtime.Runtime
	cfg    Config
	k      *Kubelet
	hostNS string
	dir    string
	image  string
	cancel context.CancelFunc
	done   chan error
}

const testCIDR = "10.89.0.0/24"

func requireIntegration(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t, "kubelet integration tests: containerd, CNI, namespaces")
	testenv.RequireCNI(t, cni.DefaultBinDirs)
	testenv.RequireTool(t, "iptables", "scripts/install-deps.sh installs it")
}

func testLog() *slog.Logger {
	if os.Getenv("FLOTILLA_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newAgent(t testing.TB) *agent {
	t.Helper()
	requireIntegration(t)
	hub := hubtest.Start(t)
	client, ns := testimage.Containerd(t)
	a := &agent{t: t, hub: hub, dir: t.TempDir(), image: testimage.App(t)}
	var err error
	a.rt, err = runtime.New(runtime.Config{Client: client, Namespace: ns, RunDir: filepath.Join(a.dir, "run"), LogDir: filepath.Join(a.dir, "logs"), LoggerPath: loggerPath})
	if err != nil {
		t.Fatal(err)
	}
	a.hostNS = filepath.Join(a.dir, "hostns")
	if err := podns.CreateNet(a.hostNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { podns.Remove(a.hostNS) })
	// Loopback up in the device's namespace, as on a real host.
	if err := podns.Do(a.hostNS, func() error { return exec.Command("ip", "link", "set", "lo", "up").Run() }); err != nil {
		t.Fatal(err)
	}
	network, err := cni.New(cni.Config{
		ConfDir: filepath.Join(a.dir, "net.d"), CacheDir: filepath.Join(a.dir, "cni-cache"),
		IPAMDataDir: filepath.Join(a.dir, "ipam"), PodCIDR: testCIDR, BridgeName: "flt-kl0",
	})
	if err != nil {
		t.Fatal(err)
	}
	puller, err := registry.NewPuller(client, registry.PullerConfig{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	// The agent's own client: its kinds, in protobuf, and its Events.
	hc, err := hubclient.NewForConfig(hub.Config)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 3)
	rand.Read(b)
	a.cfg = Config{
		NodeName: "dev-" + hex.EncodeToString(b), Client: hc, Runtime: a.rt, Network: network, Puller: puller,
		HostIPs: []string{"192.0.2.10"}, ClusterDNS: []string{"10.43.0.10"}, NetNSPath: a.hostNS,
		RootDir: filepath.Join(a.dir, "pods"), Log: testLog(),
		CrashLoopBackoff:     Backoff{Initial: time.Second, Max: 4 * time.Second, Reset: time.Minute},
		ImagePullBackoff:     Backoff{Initial: time.Second, Max: 4 * time.Second},
		SyncErrorBackoff:     Backoff{Initial: 200 * time.Millisecond, Max: 2 * time.Second},
		ResyncInterval:       2 * time.Second,
		HousekeepingInterval: 500 * time.Millisecond,
		MinGracePeriod:       time.Second,
		OrphanGracePeriod:    time.Second,
	}
	t.Cleanup(a.cleanup)
	a.start()
	return a
}

func (a *agent) start() {
	a.t.Helper()
	k, err := New(a.cfg)
	if err != nil {
		a.t.Fatal(err)
	}
	a.k = k
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel, a.done = cancel, make(chan error, 1)
	go func() { a.done <- k.Run(ctx) }()
}

// stop stops the kubelet; its pods keep running.
func (a *agent) stop() {
	a.t.Helper()
	if a.cancel == nil {
		return
	}
	a.cancel()
	a.cancel = nil
	select {
	case err := <-a.done:
		if err != nil {
			a.t.Errorf("kubelet stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		a.t.Error("kubelet did not stop within 30s")
	}
}

// cleanup removes everything the kubelet left: containers, networks,
// sandboxes, volume mounts.
func (a *agent) cleanup() {
	a.stop()
	ctx := context.Background()
	cs, _ := a.rt.ListContainers(ctx, runtime.ListFilter{})
	for _, c := range cs {
		a.rt.RemoveContainer(ctx, c.ID)
	}
	sbs, _ := a.rt.ListSandboxes(ctx)
	for _, sb := range sbs {
		if sb.NetNS() != "" {
			podns.Do(a.hostNS, func() error { return a.cfg.Network.Teardown(ctx, sb.ID, sb.NetNS()) })
		}
		if err := a.rt.RemoveSandbox(ctx, sb.ID); err != nil {
			a.t.Errorf("remove sandbox: %v", err)
		}
	}
	if a.k != nil {
		uids, _ := a.k.volumes.PodUIDs()
		for _, u := range uids {
			if err := a.k.volumes.TearDown(u); err != nil {
				a.t.Errorf("tear down volumes: %v", err)
			}
		}
	}
}

// pod is a testapp pod for this agent's node.
func (a *agent) pod(name string, mod func(*corev1.Pod)) *corev1.Pod {
	grace := int64(5)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName:                      a.cfg.NodeName,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "app", Image: a.image,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				Env: []corev1.EnvVar{
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "DRAIN_DELAY", Value: "0s"},
				},
			}},
		},
	}
	if mod != nil {
		mod(p)
	}
	return p
}

func (a *agent) create(p *corev1.Pod) *corev1.Pod {
	a.t.Helper()
	out, err := a.hub.Client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		a.t.Fatalf("create pod %s: %v", p.Name, err)
	}
	return out
}

func (a *agent) get(name string) (*corev1.Pod, error) {
	return a.hub.Client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
}

// wait polls the pod until check passes (60 s at most).
func (a *agent) wait(name, what string, check func(*corev1.Pod) error) *corev1.Pod {
	a.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var err error
	var p *corev1.Pod
	for time.Now().Before(deadline) {
		p, err = a.get(name)
		if err == nil {
			if err = check(p); err == nil {
				return p
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.t.Fatalf("pod %s: %s: %v\nstatus: %s", name, what, err, dump(p))
	return nil
}

func dump(p *corev1.Pod) string {
	if p == nil {
		return "<none>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s ip=%s", p.Status.Phase, p.Status.PodIP)
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, " %s=%s(%s)", c.Type, c.Status, c.Reason)
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		fmt.Fprintf(&b, "\n  %s ready=%v restarts=%d state=%s last=%s", cs.Name, cs.Ready, cs.RestartCount, stateString(cs.State), stateString(cs.LastTerminationState))
	}
	return b.String()
}

func stateString(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Waiting != nil:
		return "waiting:" + s.Waiting.Reason + ":" + s.Waiting.Message
	case s.Terminated != nil:
		return fmt.Sprintf("terminated:%s:%d:%s", s.Terminated.Reason, s.Terminated.ExitCode, s.Terminated.Message)
	}
	return "-"
}

func ready(p *corev1.Pod) error {
	if c := findCondition(p.Status.Conditions, corev1.PodReady); c == nil || c.Status != corev1.ConditionTrue {
		return errors.New("not Ready")
	}
	return nil
}

func cstatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	for i := range p.Status.InitContainerStatuses {
		if p.Status.InitContainerStatuses[i].Name == name {
			return &p.Status.InitContainerStatuses[i]
		}
	}
	return nil
}

func waitingReason(p *corev1.Pod, name string) string {
	if cs := cstatus(p, name); cs != nil && cs.State.Waiting != nil {
		return cs.State.Waiting.Reason
	}
	return ""
}

// http does a request from the device's network namespace.
func (a *agent) http(method, url string) (string, error) {
	tr := &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := podns.Do(a.hostNS, func() error {
				var err error
				c, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}
	req, _ := http.NewRequest(method, url, nil)
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return string(b), fmt.Errorf("%s %s: %s", method, url, resp.Status)
	}
	return string(b), err
}

// containerID is the runtime ID of the pod's container from its status.
func containerID(p *corev1.Pod, name string) string {
	if cs := cstatus(p, name); cs != nil {
		return strings.TrimPrefix(cs.ContainerID, "containerd://")
	}
	return ""
}

// events lists the Events about a pod, oldest first.
func (a *agent) events(p *corev1.Pod) []corev1.Event {
	list, err := a.hub.Client.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.UID == p.UID {
			out = append(out, e)
		}
	}
	return out
}

// waitEvent waits for an Event on the pod with reason whose message
// contains substr.
func (a *agent) waitEvent(p *corev1.Pod, reason, substr string) corev1.Event {
	a.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, e := range a.events(p) {
			if e.Reason == reason && strings.Contains(e.Message, substr) {
				return e
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	var seen []string
	for _, e := range a.events(p) {
		seen = append(seen, e.Reason+": "+e.Message)
	}
	a.t.Fatalf("no %s event containing %q on pod %s; events:\n%s", reason, substr, p.Name, strings.Join(seen, "\n"))
	return corev1.Event{}
}

func httpProbe(path string, period, failure int32) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http")}},
		PeriodSeconds: period, TimeoutSeconds: 1, FailureThreshold: failure, SuccessThreshold: 1}
}

func runtimeRef(p *corev1.Pod) runtime.PodRef {
	return runtime.PodRef{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name}
}

func runtimeFilter(p *corev1.Pod) runtime.ListFilter {
	return runtime.ListFilter{PodUID: string(p.UID)}
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

func statTime(path string) (time.Time, error) {
	st, err := os.Stat(path)
	if err != nil {
		return time.Time{}, err
	}
	return st.ModTime(), nil
}

// logTime is the CRI timestamp of the first log line containing s.
func logTime(t *testing.T, log, s string) time.Time {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if line == "" {
			continue
		}
		e, err := logdriver.ParseLine([]byte(line))
		if err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if strings.Contains(string(e.Content), s) {
			return e.Time
		}
	}
	t.Fatalf("log lacks %q: %q", s, log)
	return time.Time{}
}

func (a *agent) eventually(what string, f func() error) {
	a.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.t.Fatalf("%s: %v", what, err)
}
