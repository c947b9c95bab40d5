package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/internal/testbin"
	"flotilla.dev/flotilla/internal/testenv"
	"flotilla.dev/flotilla/test/testimage"
)

// fleet is a running fleet of devices made by scripts/demo.sh.
type fleet struct {
	t        testing.TB
	dir      string
	prefix   string
	net      string
	registry *testimage.Registry
	cs       kubernetes.Interface
	devices  int
}

func requireTools(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t, "fleet tests: network namespaces, containerd, iptables")
	testenv.RequireTools(t, "fleet tests need it; scripts/install-deps.sh installs it", "ip", "iptables", "docker-registry", "git", "curl", "containerd")
	testenv.RequireContainerd(t)
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startFleet brings up a hub and devices with the demo script, and takes
// it all down at the end of the test. agentEnv is added to the script's
// environment, which the agents inherit (FLOTILLA_<KEY>=value sets a key).
func startFleet(t testing.TB, devices int, agentEnv ...string) *fleet {
	requireTools(t)
	f := &fleet{t: t, dir: filepath.Join(t.TempDir(), "fleet"), prefix: "flote2e", net: "10.98.0", devices: devices}
	port := freePort(t)
	envFor := func(dir string) []string {
		env := append(os.Environ(),
			"FLOTDEMO_DIR="+dir, "FLOTDEMO_PREFIX="+f.prefix, "FLOTDEMO_NET="+f.net,
			fmt.Sprintf("FLOTDEMO_REGISTRY_PORT=%d", port), fmt.Sprintf("DEVICES=%d", devices),
			"FLOTILLA_BIN="+testbin.Dir(t), "NO_COLOR=1")
		return append(env, agentEnv...)
	}
	env := envFor(f.dir)
	script := filepath.Join(testbin.ModuleRoot(), "scripts", "demo.sh")
	down := func(env []string) error {
		cmd := exec.Command("bash", script, "down")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Logf("demo.sh down: %v\n%s", err, out)
		}
		return err
	}
	lock := lockFleets(t)
	if lock.stale != "" {
		// Its test run was killed before its cleanup: nobody else
		// holds the lock, so the fleet is nobody's.
		t.Logf("a test run that was killed left its fleet in %s; taking it down", lock.stale)
		if err := down(envFor(lock.stale)); err != nil {
			t.Fatalf("taking down the fleet a killed test run left in %s: %v", lock.stale, err)
		}
	}
	// Only now: a fleet that could not be taken down stays on record.
	lock.record(f.dir)
	t.Cleanup(func() {
		if down(env) == nil {
			lock.done()
		}
	})
	// Registered after down, so it runs before it: a failed test (its
	// fleet not coming up included) shows what the hub and the agents
	// said, which is gone with the temp dir.
	t.Cleanup(func() {
		if t.Failed() {
			f.dumpLogs(16 << 10)
		}
	})
	cmd := exec.Command("bash", script, "up")
	cmd.Env = env
	cmd.Dir = testbin.ModuleRoot()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("bringing up the fleet: %v\n%s", err, out.String())
	}
	t.Logf("fleet up:\n%s", tail(out.Bytes(), 2048))
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(f.dir, "hub", "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	f.cs = kubernetes.NewForConfigOrDie(cfg)
	f.registry = &testimage.Registry{Host: fmt.Sprintf("%s.1:%d", f.net, port)}
	return f
}

// fleetLock is held by the process whose test runs a fleet. Every fleet
// of these tests uses one bridge and one address range, so two test runs
// on one machine (a make test beside a CI run) take turns instead of
// tearing down each other's network. The holder writes its fleet's
// directory into the file and empties it once the fleet is down: a
// directory found there by the next holder is a fleet whose test run was
// killed before it could take it down.
const fleetLock = "/run/lock/flotilla-e2e-fleet.lock"

// heldLock is the fleet lock, held until the test ends.
type heldLock struct {
	t  testing.TB
	fd *os.File
	// stale is the fleet directory the last holder left recorded.
	stale string
}

// record writes down dir as this holder's fleet.
func (l *heldLock) record(dir string) {
	l.t.Helper()
	if err := l.fd.Truncate(0); err != nil {
		l.t.Fatalf("writing %s: %v", fleetLock, err)
	}
	if _, err := l.fd.WriteAt([]byte(dir+"\n"), 0); err != nil {
		l.t.Fatalf("writing %s: %v", fleetLock, err)
	}
}

// done records that this holder's fleet is down.
func (l *heldLock) done() {
	_ = l.fd.Truncate(0)
}

func lockFleets(t testing.TB) *heldLock {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(fleetLock), 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := os.OpenFile(fleetLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("opening the fleet lock: %v", err)
	}
	if err := syscall.Flock(int(fd.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Logf("another test run holds %s; waiting for its fleet to go", fleetLock)
		if err := syscall.Flock(int(fd.Fd()), syscall.LOCK_EX); err != nil {
			fd.Close()
			t.Fatalf("locking %s: %v", fleetLock, err)
		}
	}
	// Registered before the fleet's own cleanup, so it runs after the
	// fleet is down.
	t.Cleanup(func() { fd.Close() })
	l := &heldLock{t: t, fd: fd}
	b, err := io.ReadAll(fd)
	if err != nil {
		t.Fatalf("reading %s: %v", fleetLock, err)
	}
	l.stale = strings.TrimSpace(string(b))
	return l
}

// dumpLogs logs the last n bytes of the hub's and each device's log.
func (f *fleet) dumpLogs(n int) {
	f.t.Helper()
	logs := []string{"hub.log"}
	for i := 1; i <= f.devices; i++ {
		logs = append(logs, fmt.Sprintf("dev%d.log", i))
	}
	for _, log := range logs {
		if b, err := os.ReadFile(filepath.Join(f.dir, log)); err == nil {
			f.t.Logf("--- %s (last %d KiB)\n%s", log, n>>10, tail(b, n))
		}
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// inDevice runs a command in device i's network namespace.
func (f *fleet) inDevice(i int, args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", fmt.Sprintf("%s-dev%d", f.prefix, i)}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (f *fleet) image(name, source string) string {
	img, err := testimage.BuildImage(f.registry, name, source, testimage.Options{ExposedPorts: []string{"8080/tcp"}})
	if err != nil {
		f.t.Fatal(err)
	}
	return img.Ref
}

func waitFor(t testing.TB, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s (last error: %v)", timeout, what, lastErr)
}

// echoDeployment is the seeds' zero-downtime pattern around the test app.
func echoDeployment(image string, replicas int32, version string) *appsv1.Deployment {
	labels := map[string]string{"app": "echo"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](30),
					Containers: []corev1.Container{{
						Name: "echo", Image: image,
						Env:   []corev1.EnvVar{{Name: "VERSION", Value: version}, {Name: "DRAIN_DELAY", Value: "1s"}},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}},
							PeriodSeconds: 1, FailureThreshold: 1},
						Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/testapp", "sleep", "5s"}}}},
					}},
				},
			},
		},
	}
}

func (f *fleet) podsOf(ctx context.Context, ns, selector string) []corev1.Pod {
	l, err := f.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		f.t.Fatal(err)
	}
	return l.Items
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// runClient runs the e2e client as a pod on device node and returns its
// summary, read through the hub's pods/log.
func (f *fleet) runClient(ctx context.Context, name, node string, args ...string) clientSummary {
	f.t.Helper()
	img := f.image("e2e-client", filepath.Join(testbin.ModuleRoot(), "test", "e2e", "client"))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			NodeSelector:  map[string]string{"kubernetes.io/hostname": node},
			Containers:    []corev1.Container{{Name: "client", Image: img, Args: args}},
		},
	}
	if _, err := f.cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	var phase corev1.PodPhase
	waitFor(f.t, "client pod "+name+" to finish", 5*time.Minute+clientDuration(args), func() (bool, error) {
		p, err := f.cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	logs, err := f.cs.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		f.t.Fatalf("logs of %s through the hub: %v", name, err)
	}
	lines := strings.Split(strings.TrimSpace(string(logs)), "\n")
	var s clientSummary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		f.t.Fatalf("client %s (phase %s) printed no summary: %v\n%s", name, phase, err, logs)
	}
	return s
}

// runClientAsync is runClient in a goroutine. A failure in it ends only
// that goroutine (t.Fatal there does not stop the test), so the channel
// then carries a summary that says the client failed, and the test goes
// on to report it instead of waiting forever.
func (f *fleet) runClientAsync(ctx context.Context, name, node string, args ...string) <-chan clientSummary {
	done := make(chan clientSummary, 1)
	go func() {
		s := clientSummary{Failed: 1, Errors: []string{"client " + name + " did not finish; its error is above"}}
		defer func() { done <- s }()
		s = f.runClient(ctx, name, node, args...)
	}()
	return done
}

// clientDuration is how long a client given args sends requests.
func clientDuration(args []string) time.Duration {
	for i, a := range args {
		if a == "-duration" && i+1 < len(args) {
			d, _ := time.ParseDuration(args[i+1])
			return d
		}
	}
	return 0
}

type clientSummary struct {
	OK       int                       `json:"ok"`
	Failed   int                       `json:"failed"`
	Errors   []string                  `json:"errors"`
	Backends map[string]map[string]int `json:"backends"`
}

// TestFleetServiceNetworking is issue 6's multi-device test: a service with
// backends on two devices, reached from a pod on the third by ClusterIP and
// by DNS name; a NodePort from outside the devices; a service without
// endpoints refusing at once; readiness loss leaving every device's rules;
// and a rollout without a single failed request.
func TestFleetServiceNetworking(t *testing.T) {
	f := startFleet(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	// The demo's own service already answered through the ClusterIP from a
	// device (the script checks it). Now the test app, on two devices.
	image := f.image("testapp", testimage.AppPackage)
	if _, err := f.cs.AppsV1().Deployments("default").Create(ctx, echoDeployment(image, 2, "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := f.cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "echo"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var backends []corev1.Pod
	waitFor(t, "2 ready echo pods on 2 devices", 3*time.Minute, func() (bool, error) {
		backends = nil
		nodes := map[string]bool{}
		for _, p := range f.podsOf(ctx, "default", "app=echo") {
			if ready(&p) {
				backends = append(backends, p)
				nodes[p.Spec.NodeName] = true
			}
		}
		return len(backends) == 2 && len(nodes) == 2, nil
	})
	third := ""
	for i := 1; i <= 3; i++ {
		n := fmt.Sprintf("dev%d", i)
		if n != backends[0].Spec.NodeName && n != backends[1].Spec.NodeName {
			third = n
		}
	}
	t.Logf("backends on %s and %s; client on %s", backends[0].Spec.NodeName, backends[1].Spec.NodeName, third)

	urlIP := "http://" + svc.Spec.ClusterIP + "/"
	urlDNS := "http://echo.default.svc.cluster.local/"
	s := f.runClient(ctx, "client-reach", third, "-urls", urlIP+","+urlDNS, "-n", "40", "-interval", "10ms")
	if s.Failed > 0 {
		t.Errorf("%d requests failed from %s: %v", s.Failed, third, s.Errors)
	}
	for _, u := range []string{urlIP, urlDNS} {
		if len(s.Backends[u]) != 2 {
			t.Errorf("%s reached backends %v from %s, want both", u, s.Backends[u], third)
		}
	}

	// The same log through flotctl, as a person would read it.
	out, err := exec.Command(filepath.Join(testbin.Dir(t), "flotctl"), "--kubeconfig", filepath.Join(f.dir, "hub", "admin.kubeconfig"),
		"logs", "client-reach", "--tail", "1").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"failed":0`) {
		t.Errorf("flotctl logs client-reach: %v\n%s", err, out)
	}

	// NodePort, from outside every device (the host's own namespace).
	nodePort := svc.Spec.Ports[0].NodePort
	out, err = exec.Command("curl", "-fsS", "--max-time", "3", fmt.Sprintf("http://%s.11:%d/", f.net, nodePort)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hostname") {
		t.Errorf("NodePort %d from outside: %v %s", nodePort, err, out)
	}

	// A service without endpoints refuses at once (curl exit 7), rather
	// than black-holing (exit 28, timeout).
	empty, err := f.cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "nothing"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "nothing"}, Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a refused connection to a service without endpoints", time.Minute, func() (bool, error) {
		_, err := f.inDevice(1, "curl", "-sS", "--max-time", "3", "http://"+empty.Spec.ClusterIP+"/")
		var ee *exec.ExitError
		if err == nil {
			return false, fmt.Errorf("it answered")
		}
		if asExit(err, &ee) && ee.ExitCode() == 7 {
			return true, nil
		}
		return false, err
	})

	// Readiness lost: the endpoint leaves the rules of every device.
	victim := backends[0]
	if out, err := f.inDevice(1, "curl", "-fsS", "-X", "POST", "--max-time", "3", "http://"+victim.Status.PodIP+":8080/fail/readiness?on=true"); err != nil {
		t.Fatalf("failing readiness of %s: %v %s", victim.Name, err, out)
	}
	start := time.Now()
	for i := 1; i <= 3; i++ {
		waitFor(t, fmt.Sprintf("dev%d's rules to drop %s", i, victim.Status.PodIP), time.Minute, func() (bool, error) {
			out, err := f.inDevice(i, "iptables-save", "-t", "nat")
			return err == nil && !strings.Contains(out, "--to-destination "+victim.Status.PodIP+":"), err
		})
		t.Logf("figure: dev%d dropped the unready endpoint %v after readiness failed (probe period 1s)", i, time.Since(start).Round(10*time.Millisecond))
	}
	if out, err := f.inDevice(1, "curl", "-fsS", "-X", "POST", "--max-time", "3", "http://"+victim.Status.PodIP+":8080/fail/readiness?on=false"); err != nil {
		t.Fatalf("restoring readiness: %v %s", err, out)
	}
	waitFor(t, "the endpoint back", time.Minute, func() (bool, error) {
		p, err := f.cs.CoreV1().Pods("default").Get(ctx, victim.Name, metav1.GetOptions{})
		return err == nil && ready(p), err
	})

	// Zero-downtime rollout: a client on the third device sends requests
	// through the ClusterIP the whole time.
	done := f.runClientAsync(ctx, "client-rollout", third, "-urls", urlIP, "-duration", "75s", "-interval", "20ms")
	waitFor(t, "the rollout client to run", 2*time.Minute, func() (bool, error) {
		p, err := f.cs.CoreV1().Pods("default").Get(ctx, "client-rollout", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	})
	time.Sleep(3 * time.Second)
	d, err := f.cs.AppsV1().Deployments("default").Get(ctx, "echo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Spec.Template.Spec.Containers[0].Env[0].Value = "2"
	if _, err := f.cs.AppsV1().Deployments("default").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rollout to finish", 3*time.Minute, func() (bool, error) {
		d, err := f.cs.AppsV1().Deployments("default").Get(ctx, "echo", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == 2 && d.Status.AvailableReplicas == 2 && d.Status.Replicas == 2, nil
	})
	s = <-done
	t.Logf("figure: rollout under load: %d requests answered, %d failed", s.OK, s.Failed)
	if s.Failed > 0 {
		t.Errorf("%d requests failed during the rollout: %v", s.Failed, s.Errors)
	}
	if s.OK == 0 {
		t.Error("the rollout client got no answer at all")
	}
	if err := f.cs.CoreV1().Pods("default").Delete(ctx, "client-rollout", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}
}

func asExit(err error, target **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	if ok {
		*target = e
	}
	return ok
}
