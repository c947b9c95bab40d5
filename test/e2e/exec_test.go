package e2e

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"

	"flotilla.dev/flotilla/bench/hubapi"
	"flotilla.dev/flotilla/internal/testbin"
	"flotilla.dev/flotilla/test/testimage"
)

// execPod runs the test app on dev1 and waits until it is Ready: a real
// container on the device's containerd, whose image has nothing but
// /testapp (its helper mode stands in for echo, cat and true).
func (f *fleet) execPod(ctx context.Context, name string) *corev1.Pod {
	f.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": "dev1"},
			Containers: []corev1.Container{{
				Name: "app", Image: f.image("testapp", testimage.AppPackage),
				Env:            []corev1.EnvVar{{Name: "MARK", Value: "through-the-hub"}},
				Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}}, PeriodSeconds: 1},
			}},
		},
	}
	if _, err := f.cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	var got *corev1.Pod
	waitFor(f.t, name+" Ready on dev1", 3*time.Minute, func() (bool, error) {
		p, err := f.cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		got = p
		return err == nil && ready(p), err
	})
	return got
}

// TestKubectlExecAndPortForward runs upstream kubectl exec (output, an
// exit code, stdin), attach -i and port-forward against the hub, into a container
// on a real device: hub to the agent's server, the agent to containerd's
// task exec and into the pod's network namespace.
func TestKubectlExecAndPortForward(t *testing.T) {
	f := startFleet(t, 1)
	kubectl := testbin.Kubectl(t)
	kubeconfig := filepath.Join(f.dir, "hub", "admin.kubeconfig")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f.execPod(ctx, "shell")

	run := func(stdin string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("", "exec", "shell", "--", "/testapp", "echo", "hi", "from", "dev1"); err != nil || out != "hi from dev1\n" {
		t.Errorf("kubectl exec: %q, %v", out, err)
	}
	if out, err := run("line one\nline two\n", "exec", "-i", "shell", "-c", "app", "--", "/testapp", "cat", "/dev/stdin"); err != nil || out != "line one\nline two\n" {
		t.Errorf("kubectl exec -i: %q, %v", out, err)
	}
	// The container's own environment, not the hub's or the agent's.
	if out, err := run("", "exec", "shell", "--", "/testapp", "cat", "/proc/self/environ"); err != nil || !strings.Contains(out, "MARK=through-the-hub") {
		t.Errorf("kubectl exec sees the container's environment: %q, %v", out, err)
	}
	out, err := run("", "exec", "shell", "--", "/testapp", "exit", "3")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 || !strings.Contains(out, "command terminated with exit code 3") {
		t.Errorf("kubectl exec of a failing command: %q, %v; want exit code 3", out, err)
	}
	if out, err := run("", "exec", "shell", "--", "/no/such/binary"); err == nil || !strings.Contains(out, "no such file") {
		t.Errorf("kubectl exec of a missing binary: %q, %v; want an error naming it", out, err)
	}

	// attach -i to a process started with stdin: what kubectl sends
	// reaches it, its answers come back, and with stdinOnce the end of
	// kubectl's stdin is the process's EOF.
	console := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "console", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector:  map[string]string{"kubernetes.io/hostname": "dev1"},
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "app", Image: f.image("testapp", testimage.AppPackage),
				Command: []string{"/testapp", "relay"}, Stdin: true, StdinOnce: true,
			}},
		},
	}
	if _, err := f.cs.CoreV1().Pods("default").Create(ctx, console, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "console running on dev1", 3*time.Minute, func() (bool, error) {
		p, err := f.cs.CoreV1().Pods("default").Get(ctx, "console", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	})
	if out, err := run("one\ntwo\n", "attach", "-q", "-i", "console"); err != nil || out != "got one\ngot two\nstdin closed\n" {
		t.Errorf("kubectl attach -i: %q, %v", out, err)
	}
	if out, err := run("x\n", "attach", "-q", "-i", "shell"); err == nil || !strings.Contains(out, "does not have stdin enabled") {
		t.Errorf("kubectl attach -i to a container without stdin: %q, %v", out, err)
	}

	pf := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "port-forward", "pod/shell", ":8080")
	pfOut, err := pf.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	pf.Stderr = pf.Stdout
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { pf.Process.Kill(); pf.Wait() }()
	lines := bufio.NewScanner(pfOut)
	re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)
	local := ""
	for local == "" && lines.Scan() {
		if m := re.FindStringSubmatch(lines.Text()); m != nil {
			local = m[1]
		} else {
			t.Logf("kubectl port-forward: %s", lines.Text())
		}
	}
	if local == "" {
		t.Fatal("kubectl port-forward did not say where it listens")
	}
	go io.Copy(io.Discard, pfOut)
	// Two requests, each its own stream through the same session.
	for range 2 {
		resp, err := (&http.Client{Timeout: 20 * time.Second}).Get("http://127.0.0.1:" + local + "/env")
		if err != nil {
			t.Fatalf("GET /env through kubectl port-forward: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "MARK=through-the-hub\n") {
			t.Errorf("GET /env through kubectl port-forward: %s %q", resp.Status, body)
		}
	}
}

// BenchmarkExecRoundTrip is `make bench`'s exec figure: sequential execs
// of `/testapp exit 0` (true, in an image without a shell) through the
// hub into a container on a real device, each its own WebSocket session
// as kubectl opens. It measures a fixed number whatever b.N, so run it
// with -benchtime 1x; the figures are the p50-ms and p99-ms metrics.
func BenchmarkExecRoundTrip(b *testing.B) {
	const execs = 200
	f := startFleet(b, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	f.execPod(ctx, "bench-exec")
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(f.dir, "hub", "admin.kubeconfig"))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	r, err := hubapi.ExecRoundTrip(ctx, cfg, "default", "bench-exec", "app", []string{"/testapp", "exit", "0"}, execs)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(r.P50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(r.P99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(r.Execs), "execs")
}
