package ctl

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/hub/scheduler"
	"flotilla.dev/flotilla/internal/testenv"
	"flotilla.dev/flotilla/internal/testlog"
)

// hubRun runs flotctl against a real hub, finding it the way a user
// does: through $FLOTILLA_KUBECONFIG pointing at the admin kubeconfig.
type hubRun struct {
	t   *testing.T
	hub *hubtest.Hub
	env map[string]string
	// now is flotctl's clock; nil means time.Now. Ages in the output are
	// measured against it, so a slow machine does not change them.
	now func() time.Time
}

func startHub(t *testing.T) *hubRun {
	testenv.Integration(t, "starts a hub")
	h := hubtest.Start(t)
	kc := filepath.Join(h.DataDir, "admin.kubeconfig")
	if _, err := os.Stat(kc); err != nil {
		t.Fatalf("the hub wrote no admin kubeconfig: %v", err)
	}
	return &hubRun{t: t, hub: h, env: map[string]string{"FLOTILLA_KUBECONFIG": kc, "HOME": t.TempDir()}}
}

func (r *hubRun) run(ctx context.Context, stdin string, args ...string) (string, string, int) {
	out, errOut := &testlog.Buffer{}, &testlog.Buffer{}
	now := r.now
	if now == nil {
		now = time.Now
	}
	app := &App{In: strings.NewReader(stdin), Out: out, Err: errOut, Now: now, Getenv: func(k string) string { return r.env[k] }}
	code := Main(ctx, app, args)
	return out.String(), errOut.String(), code
}

func (r *hubRun) ok(args ...string) string {
	r.t.Helper()
	out, errOut, code := r.run(context.Background(), "", args...)
	if code != 0 {
		r.t.Fatalf("flotctl %s: exit %d\nstderr: %s\nstdout: %s", strings.Join(args, " "), code, errOut, out)
	}
	return out
}

func TestAgainstHubGetApplyDescribeDelete(t *testing.T) {
	r := startHub(t)
	ctx := context.Background()

	if out := r.ok("version"); !strings.Contains(out, "Server Version: ") {
		t.Errorf("version: %q", out)
	}

	// apply creates, then leaves alone, then merges a change.
	if out, errOut, code := r.run(ctx, appManifest, "apply", "-f", "-"); code != 0 || out != "configmap/settings created\ndeployment.apps/web created\n" {
		t.Fatalf("apply: %d %q %q", code, out, errOut)
	}
	if out, errOut, code := r.run(ctx, appManifest, "apply", "-f", "-"); code != 0 || out != "configmap/settings unchanged\ndeployment.apps/web unchanged\n" {
		t.Errorf("re-apply: %d %q %q", code, out, errOut)
	}
	changed := strings.Replace(appManifest, "replicas: 2", "replicas: 3", 1)
	if out, errOut, code := r.run(ctx, changed, "apply", "-f", "-"); code != 0 || !strings.Contains(out, "deployment.apps/web configured") {
		t.Errorf("apply change: %d %q %q", code, out, errOut)
	}
	if got := r.ok("get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"); got != "3" {
		t.Errorf("replicas after apply: %q", got)
	}

	// get in every format, and kubectl's NotFound.
	if out := r.ok("get", "configmaps"); !strings.Contains(out, "settings") || !strings.HasPrefix(out, "NAME") {
		t.Errorf("get configmaps:\n%s", out)
	}
	var list map[string]any
	if err := json.Unmarshal([]byte(r.ok("get", "ns", "-o", "json")), &list); err != nil || len(list["items"].([]any)) < 3 {
		t.Errorf("get ns -o json: %v %v", err, list)
	}
	if out := r.ok("get", "namespaces", "-o", "name"); !strings.Contains(out, "namespace/kube-node-lease\n") {
		t.Errorf("get ns -o name: %q", out)
	}
	if _, errOut, code := r.run(ctx, "", "get", "pod", "nope"); code != 1 || errOut != "Error from server (NotFound): pods \"nope\" not found\n" {
		t.Errorf("NotFound: %d %q", code, errOut)
	}

	// A pod no scheduler places: STATUS Pending, and describe blames the scheduler.
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "lonely", Namespace: "default", Labels: map[string]string{"app": "lonely"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.local/app@sha256:" + strings.Repeat("a", 64)}}}}
	if _, err := r.hub.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out := r.ok("get", "pods", "-A", "-o", "wide"); !strings.Contains(out, "lonely") || !strings.Contains(out, "Pending") || !strings.HasPrefix(out, "NAMESPACE") {
		t.Errorf("get pods -A -o wide:\n%s", out)
	}
	if out := r.ok("get", "pods", "-l", "app=other"); out != "" {
		t.Errorf("label selector matched: %q", out)
	}
	out := r.ok("describe", "pod", "lonely")
	if !strings.Contains(out, "Owner:    the scheduler") || !strings.Contains(out, "is the scheduler running?") {
		t.Errorf("describe pod:\n%s", out)
	}

	// rollout restart goes through the hub's strategic merge patch.
	if out := r.ok("rollout", "restart", "deployment/web"); out != "deployment.apps/web restarted\n" {
		t.Errorf("rollout restart: %q", out)
	}
	if got := r.ok("get", "deploy", "web", "-o", `jsonpath={.spec.template.metadata.annotations.kubectl\.kubernetes\.io/restartedAt}`); got == "" {
		t.Error("rollout restart left no restartedAt annotation")
	}
	// No deployment controller runs here, so the spec change is never observed.
	if out := r.ok("rollout", "status", "deployment/web", "--watch=false"); out != "Waiting for deployment spec update to be observed...\n" {
		t.Errorf("rollout status: %q", out)
	}

	// delete -f removes what apply made.
	if out, errOut, code := r.run(ctx, appManifest, "delete", "-f", "-"); code != 0 || out != "configmap \"settings\" deleted\ndeployment.apps \"web\" deleted\n" {
		t.Errorf("delete: %d %q %q", code, out, errOut)
	}
	if _, errOut, code := r.run(ctx, "", "get", "deploy", "web"); code != 1 || !strings.Contains(errOut, "(NotFound)") {
		t.Errorf("after delete: %d %q", code, errOut)
	}
}

func TestAgainstHubGitSourcesFleetAndWatch(t *testing.T) {
	r := startHub(t)
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(r.hub.Config)
	if err != nil {
		t.Fatal(err)
	}
	gs := gitSource("fleet", false)
	gs.ResourceVersion, gs.CreationTimestamp = "", metav1.Time{}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(gs)
	if err != nil {
		t.Fatal(err)
	}
	created, err := dyn.Resource(gitSourceGVR).Namespace("default").Create(ctx, &unstructured.Unstructured{Object: m}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Status goes through the status subresource.
	created.Object["status"] = m["status"]
	if _, err := dyn.Resource(gitSourceGVR).Namespace("default").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out := r.ok("get", "gitsources"); !strings.Contains(out, "fleet") || !strings.Contains(out, "False") || !strings.Contains(out, "aaaaaaa") {
		t.Errorf("get gitsources:\n%s", out)
	}
	if out := r.ok("describe", "gs", "fleet"); !strings.Contains(out, "file: apps/web.yaml") {
		t.Errorf("describe gitsource:\n%s", out)
	}

	// Devices: one online, one gone quiet. Heartbeats are stored to the
	// second, so flotctl's clock is pinned exactly seven minutes later.
	seen := time.Now().Truncate(time.Second).Add(-7 * time.Minute)
	r.now = func() time.Time { return seen.Add(7 * time.Minute) }
	for _, n := range []*corev1.Node{node("edge-1", true), node("kiosk-7", false)} {
		st := n.Status
		n.CreationTimestamp = metav1.Time{}
		got, err := r.hub.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.Status = st
		got.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(seen)
		got.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("2Gi")}
		if _, err := r.hub.Client.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// edge-1 reports its usage: its disk is nearly full.
	body := []byte(`{"t":"2026-01-01T00:00:00Z","w":60000,"i":60,"c":1000000000,"m":536870912,"fs":[{"n":"data","c":1000,"a":20}]}`)
	if err := r.hub.NodeClient("edge-1").CoreV1().RESTClient().Post().AbsPath(agentapi.PathUsage).SetHeader("Content-Type", "application/json").
		Body(body).Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	var out string
	waitFor(t, func() bool { out = r.ok("fleet", "status"); return strings.Contains(out, "running low") })
	squeezed := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"1 online, 1 offline", "kiosk-7 NotReady, last seen 7m ago", "default/fleet main aaaaaaa bbbbbbb False", "CRITICAL node/kiosk-7",
		"edge-1 running low: disk data 2% free", "edge-1 Ready arm64 v0.1.0 0/0 25% 25% 98% 7m ago"} {
		if !strings.Contains(squeezed, want) {
			t.Errorf("fleet status lacks %q:\n%s", want, out)
		}
	}

	// get -w sees a node arrive.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wout := &testlog.Buffer{}
	done := make(chan int)
	go func() {
		app := &App{In: strings.NewReader(""), Out: wout, Err: &testlog.Buffer{}, Now: time.Now, Getenv: func(k string) string { return r.env[k] }}
		done <- Main(wctx, app, []string{"get", "nodes", "-w"})
	}()
	waitFor(t, func() bool { return strings.Contains(wout.String(), "kiosk-7") })
	if _, err := r.hub.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "shelf-2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(wout.String(), "shelf-2") })
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("get -w exit %d", code)
	}
}

// The Diagnosis of an unschedulable pod, from the state the real scheduler
// leaves (its PodScheduled condition and FailedScheduling event).
func TestAgainstHubDiagnosisOfUnschedulablePod(t *testing.T) {
	testenv.Integration(t, "starts a hub")
	loop := hub.Loop{Name: "scheduler", Run: func(ctx context.Context, cfg *rest.Config) error {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		s, err := scheduler.New(cs, informers.NewSharedInformerFactory(cs, 0), scheduler.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			return err
		}
		return s.Run(ctx)
	}}
	h := hubtest.Start(t, hubtest.Options{Loops: []hub.Loop{loop}})
	r := &hubRun{t: t, hub: h, env: map[string]string{"FLOTILLA_KUBECONFIG": filepath.Join(h.DataDir, "admin.kubeconfig")}}
	ctx := context.Background()

	n := node("edge-1", true)
	n.CreationTimestamp = metav1.Time{}
	st := n.Status
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("4Gi")}
	got, err := h.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Status = st
	got.Status.Allocatable = n.Status.Allocatable
	got.Status.Capacity = n.Status.Allocatable
	got.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
	if _, err := h.Client.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "riscv-only", Namespace: "default"},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/arch": "riscv64"},
			Containers: []corev1.Container{{Name: "app", Image: "registry.local/app@sha256:" + strings.Repeat("b", 64)}}}}
	if _, err := h.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var out string
	waitFor(t, func() bool {
		out, _, _ = r.run(ctx, "", "describe", "pod", "riscv-only")
		// The scheduler writes the Event and the pod's PodScheduled
		// condition in two steps; the Diagnosis quotes the condition.
		return strings.Contains(out, "FailedScheduling") && strings.Contains(out, "not scheduled: ")
	})
	for _, want := range []string{"Stuck at: scheduling", "Owner:    the scheduler", "not scheduled: 0/1 nodes are available", "kubernetes.io/arch=riscv64"} {
		if !strings.Contains(out, want) {
			t.Errorf("describe lacks %q:\n%s", want, out)
		}
	}
}
