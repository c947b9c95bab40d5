package probes

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"flotilla.dev/flotilla/agent/runtime"
)

type fakeExec struct {
	code   atomic.Int32
	output string
	delay  time.Duration
	calls  atomic.Int32
}

func (f *fakeExec) Exec(ctx context.Context, id string, argv []string, timeout time.Duration) (runtime.ExecResult, error) {
	f.calls.Add(1)
	if f.delay > timeout {
		return runtime.ExecResult{}, fmt.Errorf("exec %q in %s: %w", argv, id, runtime.ErrExecTimeout)
	}
	return runtime.ExecResult{ExitCode: int(f.code.Load()), Output: []byte(f.output)}, nil
}

// server answers /ok with code, /redirect elsewhere, and records headers.
type server struct {
	*httptest.Server
	code   atomic.Int32
	header atomic.Value
}

func newServer(t *testing.T) (*server, string, int) {
	s := &server{}
	s.code.Store(200)
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		s.header.Store(r.Header.Get("X-Probe") + "|" + r.Host + "|" + r.UserAgent())
		w.WriteHeader(int(s.code.Load()))
	})
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://192.0.2.1:1/elsewhere", http.StatusFound)
	})
	mux.HandleFunc("/same", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ok", http.StatusFound)
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(s.URL, "http://"))
	p, _ := strconv.Atoi(port)
	return s, host, p
}

func TestRunnerHandlers(t *testing.T) {
	srv, host, port := newServer(t)
	ex := &fakeExec{output: "fine"}
	r := &Runner{Exec: ex}
	target := Target{PodIP: host, ContainerID: "c1", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}}
	ctx := context.Background()

	httpGet := func(path string, p intstr.IntOrString) *corev1.ProbeHandler {
		return &corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: p,
			HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "yes"}, {Name: "Host", Value: "example.test"}}}}
	}
	if res, _ := r.Probe(ctx, httpGet("/ok", intstr.FromString("http")), target, time.Second); res != Success {
		t.Fatalf("httpGet by port name = %v", res)
	}
	if got := srv.header.Load(); got != "yes|example.test|kube-probe/flotilla" {
		t.Errorf("request seen as %q", got)
	}
	srv.code.Store(500)
	if res, msg := r.Probe(ctx, httpGet("/ok", intstr.FromInt32(int32(port))), target, time.Second); res != Failure || msg != "HTTP probe failed with statuscode: 500" {
		t.Fatalf("500 = %v %q", res, msg)
	}
	srv.code.Store(302)
	if res, _ := r.Probe(ctx, httpGet("/away", intstr.FromInt32(int32(port))), target, time.Second); res != Success {
		t.Fatalf("redirect to another host = %v", res)
	}
	srv.code.Store(503)
	if res, _ := r.Probe(ctx, httpGet("/same", intstr.FromInt32(int32(port))), target, time.Second); res != Failure {
		t.Fatalf("redirect to a failing path on the same host = %v", res)
	}
	if res, msg := r.Probe(ctx, httpGet("/ok", intstr.FromString("nope")), target, time.Second); res != Failure || !strings.Contains(msg, `couldn't find port "nope"`) {
		t.Fatalf("unknown port name = %v %q", res, msg)
	}

	tcp := func(p int) *corev1.ProbeHandler {
		return &corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(p))}}
	}
	if res, _ := r.Probe(ctx, tcp(port), target, time.Second); res != Success {
		t.Fatal("tcp to a listener failed")
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	if res, msg := r.Probe(ctx, tcp(closed), target, time.Second); res != Failure || !strings.Contains(msg, "refused") {
		t.Fatalf("tcp to a closed port = %v %q", res, msg)
	}

	exec := &corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"check"}}}
	if res, out := r.Probe(ctx, exec, target, time.Second); res != Success || out != "fine" {
		t.Fatalf("exec = %v %q", res, out)
	}
	ex.code.Store(2)
	if res, _ := r.Probe(ctx, exec, target, time.Second); res != Failure {
		t.Fatal("exec exit 2 succeeded")
	}
	ex.delay = 2 * time.Second
	if res, msg := r.Probe(ctx, exec, target, time.Second); res != Failure || !strings.Contains(msg, "timed out") {
		t.Fatalf("exec timeout = %v %q", res, msg)
	}

	// Hooks.
	ex.delay = 0
	ex.code.Store(0)
	if err := r.Hook(ctx, &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"x"}}}, target, time.Second); err != nil {
		t.Fatal(err)
	}
	ex.code.Store(1)
	if err := r.Hook(ctx, &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"x"}}}, target, time.Second); err == nil || !strings.Contains(err.Error(), "Exec lifecycle hook (x)") {
		t.Fatalf("failing hook = %v", err)
	}
	srv.code.Store(200)
	if err := r.Hook(ctx, &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(port))}}, target, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := r.Hook(ctx, &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 0}}, target, time.Second); err != nil {
		t.Fatal(err)
	}
}

type reporter struct {
	mu   sync.Mutex
	msgs []string
}

func (r *reporter) ProbeFailed(pod *corev1.Pod, c string, kind Kind, out string) {
	r.mu.Lock()
	r.msgs = append(r.msgs, string(kind)+" "+c+": "+out)
	r.mu.Unlock()
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestManagerThresholdsAndRestarts(t *testing.T) {
	srv, host, port := newServer(t)
	changes := make(chan types.UID, 100)
	rep := &reporter{}
	m := NewManager(Config{Runner: &Runner{}, OnChange: func(u types.UID) { changes <- u }, Reporter: rep})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	probe := func(path string, success, failure int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(int32(port))}},
			PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: success, FailureThreshold: failure}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "pod-1", Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", ReadinessProbe: probe("/ok", 1, 1), LivenessProbe: probe("/ok", 1, 2)},
			{Name: "plain"},
			{Name: "slow", StartupProbe: probe("/ok", 1, 1), ReadinessProbe: probe("/ok", 1, 1)},
		}}}
	if m.Ready(pod, "app", "c1") {
		t.Fatal("ready before any worker")
	}
	m.Sync(ctx, pod, host, []Running{{Name: "app", ID: "c1", StartedAt: time.Now()}, {Name: "plain", ID: "p1"}, {Name: "slow", ID: "s1", StartedAt: time.Now()}})
	if !m.Ready(pod, "plain", "p1") || !m.Started(pod, "plain", "p1") {
		t.Fatal("a container without probes is ready")
	}
	eventually(t, "app ready", func() bool { return m.Ready(pod, "app", "c1") })
	eventually(t, "slow started and ready", func() bool { return m.Started(pod, "slow", "s1") && m.Ready(pod, "slow", "s1") })
	if m.Ready(pod, "app", "other-id") {
		t.Fatal("result applied to another container ID")
	}
	if <-changes != "pod-1" {
		t.Fatal("OnChange not called with the pod UID")
	}

	// The endpoint fails: readiness (threshold 1) goes first, liveness
	// (threshold 2) follows and asks for a restart.
	srv.code.Store(500)
	eventually(t, "not ready", func() bool { return !m.Ready(pod, "app", "c1") })
	eventually(t, "liveness failure", func() bool { k, ok := m.Failed(pod, "app", "c1"); return ok && k == Liveness })
	rep.mu.Lock()
	if len(rep.msgs) == 0 || !strings.Contains(rep.msgs[0], "HTTP probe failed with statuscode: 500") {
		t.Errorf("reported = %q", rep.msgs)
	}
	rep.mu.Unlock()

	// The kubelet restarts it: a new container ID starts from scratch.
	srv.code.Store(200)
	m.Sync(ctx, pod, host, []Running{{Name: "app", ID: "c2", StartedAt: time.Now()}})
	if _, failed := m.Failed(pod, "app", "c2"); failed {
		t.Fatal("new container inherits the failure")
	}
	eventually(t, "restarted container ready", func() bool { return m.Ready(pod, "app", "c2") })

	// An adopted container that was ready stays ready from the start.
	m.RemovePod("pod-1")
	srv.code.Store(500)
	m.Sync(ctx, pod, host, []Running{{Name: "app", ID: "c2", StartedAt: time.Now(), WasReady: true}})
	if !m.Ready(pod, "app", "c2") {
		t.Fatal("adopted ready container not seeded ready")
	}
	m.RemovePod("pod-1")
	if m.Ready(pod, "app", "c2") {
		t.Fatal("results kept after RemovePod")
	}
}

func TestInitialDelayAndTimeout(t *testing.T) {
	_, host, port := newServer(t)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(1500 * time.Millisecond)
	}))
	defer slow.Close()
	_, slowPort, _ := net.SplitHostPort(strings.TrimPrefix(slow.URL, "http://"))
	sp, _ := strconv.Atoi(slowPort)

	r := &Runner{}
	res, msg := r.Probe(context.Background(), &corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(int32(sp))}}, Target{PodIP: host}, time.Second)
	if res != Failure || !strings.Contains(msg, "Client.Timeout") && !strings.Contains(msg, "deadline exceeded") {
		t.Fatalf("slow endpoint with a 1s timeout = %v %q", res, msg)
	}

	m := NewManager(Config{Runner: r})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "pod-2"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app",
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(port))}},
			InitialDelaySeconds: 2, PeriodSeconds: 1}}}}}
	started := time.Now()
	m.Sync(ctx, pod, host, []Running{{Name: "app", ID: "c1", StartedAt: started}})
	eventually(t, "ready after the initial delay", func() bool { return m.Ready(pod, "app", "c1") })
	if since := time.Since(started); since < 2*time.Second {
		t.Fatalf("ready after %v, before initialDelaySeconds", since)
	}
}
