package ctl

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/gitops/controller"
	"flotilla.dev/flotilla/gitops/gittest"
	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/internal/testenv"
)

func webDeployment(digit string) map[string]string {
	return map[string]string{"web.yaml": strings.Replace(appManifest[strings.Index(appManifest, "apiVersion: apps/v1"):], "1111", strings.Repeat(digit, 4), -1)}
}

// createSource makes a GitSource that polls once an hour, so that only a
// reconcile request fetches within a test.
func createSource(t *testing.T, rc *rest.Config, ns, name, url string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	gs := &v1alpha1.GitSource{TypeMeta: metav1.TypeMeta{APIVersion: "flotilla.dev/v1alpha1", Kind: "GitSource"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.GitSourceSpec{URL: url, Ref: v1alpha1.GitRef{Branch: "main"},
			Interval: &metav1.Duration{Duration: time.Hour}, Timeout: &metav1.Duration{Duration: time.Minute}}}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(gs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(gitSourceGVR).Namespace(ns).Create(context.Background(), &unstructured.Unstructured{Object: m}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// The documented flow: push, `flotctl reconcile source`, then `flotctl
// rollout status`, which follows the rollout of the pushed commit.
func TestAgainstHubReconcileSource(t *testing.T) {
	testenv.Integration(t, "starts a hub")
	if err := gittest.Available(); err != nil {
		testenv.Unavailable(t, "%v (scripts/install-deps.sh installs it)", err)
	}
	g, err := gittest.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	commit := func(msg string, files map[string]string) string {
		t.Helper()
		if err := g.Write(files); err != nil {
			t.Fatal(err)
		}
		c, err := g.Commit(msg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dataDir := t.TempDir()
	loop := hub.Loop{Name: "gitops", Run: func(ctx context.Context, rc *rest.Config) error {
		return controller.New(controller.Config{DataDir: dataDir, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Run(ctx, rc)
	}}
	h := hubtest.Start(t, hubtest.Options{Loops: []hub.Loop{loop}})
	r := &hubRun{t: t, hub: h, env: map[string]string{"FLOTILLA_KUBECONFIG": filepath.Join(h.DataDir, "admin.kubeconfig")}}
	ctx := context.Background()

	// No NAME: the hub's own source, flotilla-system/default.
	c1 := commit("one", webDeployment("1"))
	createSource(t, h.Config, api.NamespaceSystem, "default", g.URL)
	if out := r.ok("reconcile", "source"); !strings.Contains(out, "gitsource flotilla-system/default: applied commit "+c1) {
		t.Fatalf("first reconcile:\n%s", out)
	}

	// The rollout of c1 is done (no deployment controller runs here:
	// the test writes what it would).
	d, err := h.Client.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}
	if _, err := h.Client.AppsV1().Deployments("default").UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out := r.ok("rollout", "status", "deployment/web", "--watch=false"); !strings.Contains(out, "successfully rolled out") {
		t.Fatalf("rollout status of c1: %q", out)
	}

	// A push, then reconcile: when it returns, the new commit is applied
	// and rollout status follows its rollout instead of calling the
	// previous one done.
	c2 := commit("two", webDeployment("2"))
	out := r.ok("reconcile", "source")
	if want := "applied commit " + c2 + ": 0 created, 1 updated, 0 pruned, 0 unchanged"; !strings.Contains(out, want) {
		t.Errorf("reconcile after a push lacks %q:\n%s", want, out)
	}
	if out := r.ok("rollout", "status", "deployment/web", "--watch=false"); out != "Waiting for deployment spec update to be observed...\n" {
		t.Errorf("rollout status after reconcile: %q", out)
	}

	// A broken commit: the command fails, says why, what stays applied
	// and what to do.
	commit("three", map[string]string{"web.yaml": "kind: [\n"})
	_, errOut, code := r.run(ctx, "", "reconcile", "source", "default", "-n", api.NamespaceSystem)
	for _, want := range []string{"did not apply the newest commit (ValidationFailed)", "web.yaml", "commit " + c2 + " stays applied", "to do: fix"} {
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("broken commit: exit %d, stderr lacks %q:\n%s", code, want, errOut)
		}
	}

	// Names that are not there.
	if _, errOut, code := r.run(ctx, "", "reconcile", "source", "nope"); code != 1 || errOut != "Error from server (NotFound): gitsources.flotilla.dev \"nope\" not found\n" {
		t.Errorf("unknown source: %d %q", code, errOut)
	}
	if _, errOut, code := r.run(ctx, "", "reconcile", "source", "-n", "default"); code != 1 || !strings.Contains(errOut, "no GitSource default/default") {
		t.Errorf("no default source: %d %q", code, errOut)
	}
}

// Without a GitOps loop nobody answers: the command gives up at the
// timeout and says what to check.
func TestAgainstHubReconcileSourceTimesOut(t *testing.T) {
	r := startHub(t)
	createSource(t, r.hub.Config, "default", "fleet", "file:///srv/git/fleet.git")
	start := time.Now()
	_, errOut, code := r.run(context.Background(), "", "reconcile", "source", "fleet", "-n", "default", "--timeout", "1s")
	if code != 1 || !strings.Contains(errOut, "gitsource default/fleet: timed out after 1s") || !strings.Contains(errOut, "to do: check that the hub runs its GitOps loop") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	if time.Since(start) > 20*time.Second {
		t.Errorf("a 1s timeout took %s", time.Since(start))
	}
	// The request stays for the hub to answer later.
	dyn, _ := dynamic.NewForConfig(r.hub.Config)
	u, err := dyn.Resource(gitSourceGVR).Namespace("default").Get(context.Background(), "fleet", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u.GetAnnotations()[v1alpha1.AnnotationReconcileRequestedAt] == "" {
		t.Errorf("no request annotation: %v", u.GetAnnotations())
	}

	// A suspended source is refused at once.
	u.Object["spec"].(map[string]any)["suspend"] = true
	if _, err := dyn.Resource(gitSourceGVR).Namespace("default").Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := r.run(context.Background(), "", "reconcile", "source", "fleet", "-n", "default"); code != 1 || !strings.Contains(errOut, "is suspended (spec.suspend: true)") {
		t.Errorf("suspended: %d %q", code, errOut)
	}
}
