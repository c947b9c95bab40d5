package ctl

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

func TestGetTable(t *testing.T) {
	h := newHarness(t, pod("default", "web-1", "edge-1", map[string]string{"app": "web"}), pod("default", "db-1", "edge-2", map[string]string{"app": "db"}),
		pod("shop", "kiosk-1", "edge-3", nil), node("edge-1", true))
	out := h.ok("get", "pods")
	want := "NAME      READY     STATUS    RESTARTS   AGE\ndb-1      1/1       Running   0          60m\nweb-1     1/1       Running   0          60m\n"
	if out != want {
		t.Errorf("get pods:\n%s\nwant\n%s", out, want)
	}
	if out := h.ok("get", "po", "-l", "app=web", "-o", "wide"); !strings.Contains(out, "web-1") || strings.Contains(out, "db-1") || !strings.Contains(out, "edge-1") || !strings.Contains(out, "NOMINATED NODE") {
		t.Errorf("get po -l app=web -o wide:\n%s", out)
	}
	out = h.ok("get", "pods", "-A")
	if !strings.HasPrefix(out, "NAMESPACE") || !strings.Contains(out, "shop        kiosk-1") {
		t.Errorf("get pods -A:\n%s", out)
	}
	// Cluster-scoped kinds get no namespace column even with -A.
	if out := h.ok("get", "nodes", "-A"); strings.Contains(out, "NAMESPACE") || !strings.Contains(out, "edge-1    Ready") {
		t.Errorf("get nodes -A:\n%s", out)
	}
	if _, errOut, code := h.run("get", "deployments"); code != 0 || errOut != "No resources found in default namespace.\n" {
		t.Errorf("empty list: exit %d, stderr %q", code, errOut)
	}
}

func TestGetNotFoundReadsLikeKubectl(t *testing.T) {
	h := newHarness(t, pod("default", "web-1", "edge-1", nil))
	out, errOut, code := h.run("get", "pods", "web-1", "nope")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if errOut != "Error from server (NotFound): pods \"nope\" not found\n" {
		t.Errorf("stderr %q", errOut)
	}
	if !strings.Contains(out, "web-1") {
		t.Errorf("found pod not printed: %q", out)
	}
	if _, errOut, code := h.run("get", "pods", "nope", "--ignore-not-found"); code != 0 || errOut != "" {
		t.Errorf("--ignore-not-found: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, code := h.run("get", "widgets"); code != 1 || !strings.HasPrefix(errOut, "error: the server doesn't have a resource type \"widgets\"") {
		t.Errorf("unknown kind: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, code := h.run("get", "pods", "-o", "xml"); code != 1 || !strings.Contains(errOut, "allowed formats are") {
		t.Errorf("bad -o: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, _ := h.run("get", "pods", "-o", "xml"); strings.Contains(errOut, "goroutine") || strings.Contains(errOut, "panic") {
		t.Errorf("stack trace on stderr: %s", errOut)
	}
}

func TestGetOutputFormats(t *testing.T) {
	h := newHarness(t, pod("default", "web-1", "edge-1", nil), pod("default", "web-2", "edge-1", nil), deployment("web", 2))

	var single corev1.Pod
	if err := yaml.Unmarshal([]byte(h.ok("get", "pod", "web-1", "-o", "yaml")), &single); err != nil {
		t.Fatal(err)
	}
	if single.Kind != "Pod" || single.APIVersion != "v1" || single.Name != "web-1" {
		t.Errorf("-o yaml of one pod: %+v", single.TypeMeta)
	}

	var list struct {
		Kind  string           `json:"kind"`
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal([]byte(h.ok("get", "pods", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	if list.Kind != "List" || len(list.Items) != 2 || list.Items[0]["kind"] != "Pod" {
		t.Errorf("-o json list: kind %q, %d items", list.Kind, len(list.Items))
	}

	if got := h.ok("get", "pods,deploy", "-o", "name"); got != "pod/web-1\npod/web-2\ndeployment.apps/web\n" {
		t.Errorf("-o name: %q", got)
	}
	if got := h.ok("get", "pods", "-o", "jsonpath={.items[*].spec.nodeName}"); got != "edge-1 edge-1" {
		t.Errorf("-o jsonpath: %q", got)
	}
	if got := h.ok("get", "deploy/web", "-o", "jsonpath={.spec.replicas}"); got != "2" {
		t.Errorf("-o jsonpath on one object: %q", got)
	}
}

func TestGetGitSourcesThroughTheDynamicClient(t *testing.T) {
	h := newHarness(t, gitSource("fleet", true), gitSource("kiosks", false))
	out := h.ok("get", "gitsources")
	for _, want := range []string{"NAME     URL                        REF       COMMIT    READY     MESSAGE", "fleet    file:///srv/git/fleet.git  ", "aaaaaaa", "Invalid value: -1"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("get gitsources does not show %q:\n%s", want, out)
		}
	}
	if got := h.ok("get", "gs", "fleet", "-o", "jsonpath={.status.lastAppliedCommit}"); got != "aaaaaaa111" {
		t.Errorf("jsonpath on gitsource: %q", got)
	}
}

func TestGetSecretHidesValues(t *testing.T) {
	h := newHarness(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "creds"}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"password": []byte("hunter2")}})
	out := h.ok("get", "secrets", "-o", "wide")
	if strings.Contains(out, "hunter2") || strings.Contains(out, "aHVudGVyMg") || !strings.Contains(out, "Opaque") {
		t.Errorf("get secrets:\n%s", out)
	}
}

func TestGetWatchPrintsChanges(t *testing.T) {
	h := newHarness(t, pod("default", "web-1", "edge-1", nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int)
	go func() {
		_, _, code := h.runCtx(ctx, "get", "pods", "-w")
		done <- code
	}()
	waitFor(t, func() bool { return h.out != nil && strings.Contains(h.out.String(), "web-1") })
	// The fake's watch starts after the list; create until seen.
	waitFor(t, func() bool {
		p := pod("default", "web-2", "edge-1", nil)
		p.Status.Phase, p.Status.ContainerStatuses = corev1.PodPending, nil
		_, _ = h.typed.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		return strings.Contains(h.out.String(), "web-2")
	})
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("watch ended with %d: %s", code, h.err.String())
	}
	out := h.out.String()
	if strings.Count(out, "NAME") != 1 || !strings.Contains(out, "web-2     0/1       Pending") {
		t.Errorf("watch output:\n%s", out)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
