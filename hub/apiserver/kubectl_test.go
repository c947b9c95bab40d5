package apiserver_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/internal/testbin"
)

// TestKubectlWorksUnchanged drives the hub with a stock kubectl (built from
// the k8s.io/kubectl go.mod pins, see internal/testbin.Kubectl): apply (with
// its default validation, which needs the OpenAPI documents), get with
// server-side columns, explain, patch, logs of a strict-validation error,
// and delete.
func TestKubectlWorksUnchanged(t *testing.T) {
	run, manifest, write := kubectlOnHub(t)
	app := `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: ` + testImage + `
        ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
`
	write(app)
	if out, err := run("apply", "-f", manifest); err != nil || !strings.Contains(out, "deployment.apps/web created") {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	write(strings.Replace(app, "replicas: 2", "replicas: 3", 1))
	if out, err := run("apply", "-f", manifest); err != nil || !strings.Contains(out, "deployment.apps/web configured") || !strings.Contains(out, "service/web unchanged") {
		t.Fatalf("kubectl apply of a change: %v\n%s", err, out)
	}
	out, err := run("get", "deployments")
	if err != nil || !strings.Contains(out, "UP-TO-DATE") || !strings.Contains(out, "web") {
		t.Fatalf("kubectl get deployments: %v\n%s", err, out)
	}
	out, err = run("get", "deploy", "web", "-o", "jsonpath={.spec.replicas}")
	if err != nil || out != "3" {
		t.Fatalf("replicas after apply: %v %q", err, out)
	}
	out, err = run("explain", "pods.spec.containers.image")
	if err != nil || !strings.Contains(out, "image") {
		t.Fatalf("kubectl explain: %v\n%s", err, out)
	}
	write(strings.Replace(app, "replicas: 2", "replicas: 3\n  replicaz: 4", 1))
	out, err = run("apply", "-f", manifest)
	if err == nil || !strings.Contains(out, "replicaz") {
		t.Fatalf("kubectl apply with an unknown field must fail naming it: %v\n%s", err, out)
	}
	if out, err := run("scale", "deployment/web", "--replicas=1"); err != nil {
		t.Fatalf("kubectl scale: %v\n%s", err, out)
	}
	if out, err := run("delete", "-f", manifest); err != nil {
		t.Fatalf("kubectl delete: %v\n%s", err, out)
	}
	if out, _ := run("get", "deploy", "web"); !strings.Contains(out, "NotFound") {
		t.Fatalf("after delete: %s", out)
	}
}

// TestKubectlServerSideApply drives server-side apply with the stock
// kubectl: apply --server-side creates and changes, records kubectl's
// ownership in managedFields, reports another manager's change of an owned
// field as kubectl reports kube-apiserver's conflicts, takes it with
// --force-conflicts, and --dry-run=server writes nothing. A flotilla.dev
// kind is applied the same way.
func TestKubectlServerSideApply(t *testing.T) {
	run, manifest, write := kubectlOnHub(t)
	app := `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: ` + testImage + `
---
apiVersion: flotilla.dev/v1alpha1
kind: GitSource
metadata: {name: fleet}
spec:
  url: https://git.example.com/fleet.git
  ref: {branch: main}
`
	write(app)
	out, err := run("apply", "--server-side", "-f", manifest)
	if err != nil || !strings.Contains(out, "deployment.apps/web serverside-applied") || !strings.Contains(out, "gitsource.flotilla.dev/fleet serverside-applied") {
		t.Fatalf("kubectl apply --server-side: %v\n%s", err, out)
	}
	out, err = run("get", "deploy", "web", "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[0].manager}/{.metadata.managedFields[0].operation}")
	if err != nil || out != "kubectl/Apply" {
		t.Fatalf("managedFields after kubectl apply --server-side: %v %q", err, out)
	}

	// Another manager applies other replicas: kubectl owns them.
	write(strings.Replace(app, "replicas: 2", "replicas: 4", 1))
	out, err = run("apply", "--server-side", "--field-manager=ci", "-f", manifest)
	if err == nil || !strings.Contains(out, `conflict with "kubectl"`) || !strings.Contains(out, ".spec.replicas") {
		t.Fatalf("a conflicting apply must fail naming kubectl and .spec.replicas: %v\n%s", err, out)
	}
	out, err = run("apply", "--server-side", "--field-manager=ci", "--dry-run=server", "--force-conflicts", "-f", manifest)
	if err != nil || !strings.Contains(out, "serverside-applied (server dry run)") {
		t.Fatalf("dry-run apply: %v\n%s", err, out)
	}
	if out, _ := run("get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"); out != "2" {
		t.Fatalf("a server dry run changed replicas to %q", out)
	}
	out, err = run("apply", "--server-side", "--field-manager=ci", "--force-conflicts", "-f", manifest)
	if err != nil || !strings.Contains(out, "deployment.apps/web serverside-applied") {
		t.Fatalf("apply --force-conflicts: %v\n%s", err, out)
	}
	out, err = run("get", "deploy", "web", "-o", "jsonpath={.spec.replicas}")
	if err != nil || out != "4" {
		t.Fatalf("replicas after the forced apply: %v %q", err, out)
	}

	// kubectl's --subresource=scale sends the workload itself, which a
	// scale apply refuses as kube-apiserver does (400: it takes a Scale).
	write(strings.SplitN(app, "---", 2)[0])
	out, err = run("apply", "--server-side", "--subresource=scale", "-f", manifest)
	if err == nil || !strings.Contains(out, "set apiVersion: autoscaling/v1 and kind: Scale") {
		t.Fatalf("apply --subresource=scale of a Deployment: want a 400 asking for a Scale: %v\n%s", err, out)
	}
	write(app)

	// The GitSource's fields are typed by its schema: a change merges.
	write(strings.Replace(app, "branch: main", "branch: release", 1))
	if out, err := run("apply", "--server-side", "--field-manager=ci", "--force-conflicts", "-f", manifest); err != nil {
		t.Fatalf("apply of a changed GitSource: %v\n%s", err, out)
	}
	out, err = run("get", "gitsource", "fleet", "-o", "jsonpath={.spec.ref.branch} {.spec.url}")
	if err != nil || out != "release https://git.example.com/fleet.git" {
		t.Fatalf("GitSource after apply: %v %q", err, out)
	}
}

// kubectlOnHub starts a hub for upstream kubectl: run runs kubectl
// against it, write puts a manifest at the path it returns.
func kubectlOnHub(t *testing.T) (run func(args ...string) (string, error), manifest string, write func(string)) {
	t.Helper()
	kubectl := testbin.Kubectl(t)
	h := hubtest.Start(t)
	run = func(args ...string) (string, error) {
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", h.KubeconfigPath()}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	manifest = filepath.Join(t.TempDir(), "app.yaml")
	write = func(s string) {
		if err := os.WriteFile(manifest, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return run, manifest, write
}
