package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"

	"flotilla.dev/flotilla/api"
)

func crashingPod() *corev1.Pod {
	p := pod("default", "web-1", "edge-1", map[string]string{"app": "web"})
	p.Status.Conditions[0].Status = corev1.ConditionFalse
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", RestartCount: 4,
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error", FinishedAt: before(time.Minute)}}}}
	return p
}

func TestDescribePodEndsWithDiagnosis(t *testing.T) {
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1.a"}, Type: "Warning", Reason: "BackOff",
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-1"}, Message: "Back-off restarting failed container app",
		Source: corev1.EventSource{Component: "flotilla-agent", Host: "edge-1"}, LastTimestamp: before(30 * time.Second), Count: 5}
	h := newHarness(t, crashingPod(), node("edge-1", true), ev)
	out := h.ok("describe", "pod", "web-1")
	for _, want := range []string{
		"Name:", "web-1", "Status:", "CrashLoopBackOff", "Exit Code:", "Events:", "BackOff", "(x5)",
		"Diagnosis:", "CRITICAL", "container app keeps stopping: last exit code 2 (Error)", "Owner:    the application (container app)",
		// client-go's fake answers every log request with "fake logs".
		"| fake logs",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("describe pod lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("colour written to a non-terminal")
	}
	if _, errOut, code := h.run("describe", "pod", "nope"); code != 1 || errOut != "Error from server (NotFound): pods \"nope\" not found\n" {
		t.Errorf("describe missing pod: exit %d, %q", code, errOut)
	}
}

func TestDescribeServiceAndNodeAndGitSource(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, ClusterIP: "10.43.0.10"}}
	h := newHarness(t, svc, crashingPod(), node("edge-1", true), node("kiosk-7", false), gitSource("fleet", false))
	out := h.ok("describe", "svc", "web")
	if !strings.Contains(out, "no ready endpoints: selector app=web matches 1 pods, 0 ready") {
		t.Errorf("describe service:\n%s", out)
	}
	out = h.ok("describe", "node/kiosk-7")
	if !strings.Contains(out, "device is NotReady, last seen 7m ago") || !strings.Contains(out, "Owner:    the agent on device kiosk-7") {
		t.Errorf("describe node:\n%s", out)
	}
	out = h.ok("describe", "gitsource", "fleet")
	if !strings.Contains(out, "commit bbbbbbb not applied") || !strings.Contains(out, "file: apps/web.yaml") {
		t.Errorf("describe gitsource:\n%s", out)
	}
}

func TestFleetStatus(t *testing.T) {
	d := deployment("web", 2)
	d.Status.ReadyReplicas, d.Status.AvailableReplicas = 1, 1
	h := newHarness(t, node("edge-1", true), node("kiosk-7", false), crashingPod(), pod("default", "web-2", "edge-1", map[string]string{"app": "web"}),
		d, gitSource("fleet", false))
	out := h.ok("fleet", "status")
	squeezed := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{
		"DEVICES 1 online, 1 offline", "by architecture arm64 1 (+1 offline)", "kiosk-7 NotReady, last seen 7m ago",
		"edge-1 Ready arm64 v0.1.0 1/2 - - - 7m ago",
		"SOURCES", "default/fleet main aaaaaaa bbbbbbb False", "WORKLOADS", "deployment default/web 2 2 1 1 in progress",
		"PROBLEMS (4, worst first)", "owner: the agent on device kiosk-7",
	} {
		if !strings.Contains(squeezed, want) {
			t.Errorf("fleet status lacks %q:\n%s", want, out)
		}
	}
	// Worst first: the source and the offline device before the crash loop.
	if i, j := strings.Index(out, "gitsource/default/fleet:"), strings.Index(out, "pod/default/web-1:"); i < 0 || j < 0 || i > j {
		t.Errorf("problems not worst first:\n%s", out)
	}
}

func TestFleetStatusWatchRedraws(t *testing.T) {
	h := newHarness(t, node("edge-1", true))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		_, _, code := h.runCtx(ctx, "fleet", "status", "--watch", "--interval", "50ms")
		done <- code
	}()
	waitFor(t, func() bool { return h.out != nil && strings.Contains(h.out.String(), "1 online, 0 offline") })
	if _, err := h.typed.CoreV1().Nodes().Create(ctx, node("kiosk-7", false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(h.out.String(), "1 online, 1 offline") })
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d: %s", code, h.err.String())
	}
}

func TestRolloutStatus(t *testing.T) {
	done := deployment("web", 2)
	h := newHarness(t, done)
	if out := h.ok("rollout", "status", "deployment/web"); out != "deployment \"web\" successfully rolled out\n" {
		t.Errorf("done rollout: %q", out)
	}

	// Stuck past its deadline: exit 1 with the reason and the owner.
	stuck := deployment("api", 2)
	stuck.Status.ReadyReplicas, stuck.Status.AvailableReplicas = 0, 0
	stuck.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "api-1" has timed out progressing.`}}
	p := pod("default", "api-1-x", "", map[string]string{"app": "api"})
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."}}}
	h = newHarness(t, stuck, p)
	_, errOut, code := h.run("rollout", "status", "deploy", "api")
	if code != 1 || !strings.Contains(errOut, "exceeded its progress deadline") || !strings.Contains(errOut, "owner: the scheduler") || !strings.Contains(errOut, "node affinity") {
		t.Errorf("stuck rollout: exit %d\n%s", code, errOut)
	}

	// In progress: follows until done.
	prog := deployment("web", 3)
	prog.Status.UpdatedReplicas, prog.Status.AvailableReplicas = 1, 1
	h = newHarness(t, prog)
	res := make(chan int)
	go func() { _, _, code := h.run("rollout", "status", "deployment", "web"); res <- code }()
	waitFor(t, func() bool {
		return h.out != nil && strings.Contains(h.out.String(), "1 out of 3 new replicas have been updated")
	})
	waitFor(t, func() bool {
		d, _ := h.typed.AppsV1().Deployments("default").Get(context.Background(), "web", metav1.GetOptions{})
		d.Status.UpdatedReplicas, d.Status.AvailableReplicas = 3, 3
		_, _ = h.typed.AppsV1().Deployments("default").UpdateStatus(context.Background(), d, metav1.UpdateOptions{})
		return strings.Contains(h.out.String(), "successfully rolled out")
	})
	if code := <-res; code != 0 {
		t.Errorf("followed rollout exit %d: %s", code, h.err.String())
	}

	// Timeout fails with a reason.
	prog = deployment("web", 3)
	prog.Status.UpdatedReplicas = 1
	h = newHarness(t, prog)
	if _, errOut, code := h.run("rollout", "status", "deployment/web", "--timeout", "100ms"); code != 1 || !strings.Contains(errOut, "timed out waiting for the rollout") {
		t.Errorf("timeout: exit %d %q", code, errOut)
	}
}

func replicaSet(d *appsv1.Deployment, rev, image, cause string) *appsv1.ReplicaSet {
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: d.Name + "-" + rev, Labels: map[string]string{"app": d.Name, api.LabelPodTemplateHash: rev},
		Annotations:     map[string]string{"deployment.kubernetes.io/revision": rev},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, Controller: ptr(true)}}},
		Spec: appsv1.ReplicaSetSpec{Template: *d.Spec.Template.DeepCopy()}}
	rs.Spec.Template.Labels = map[string]string{"app": d.Name, api.LabelPodTemplateHash: rev}
	rs.Spec.Template.Spec.Containers[0].Image = image
	if cause != "" {
		rs.Annotations["kubernetes.io/change-cause"] = cause
	}
	return rs
}

func TestRolloutHistoryUndoRestart(t *testing.T) {
	d := deployment("web", 2)
	h := newHarness(t, d, replicaSet(d, "1", "registry.local/app@sha256:v1", "first"), replicaSet(d, "2", "registry.local/app@sha256:v2", ""))
	out := h.ok("rollout", "history", "deployment/web")
	if !strings.Contains(out, "1          first") || !strings.Contains(out, "2          <none>") {
		t.Errorf("history:\n%s", out)
	}
	if out := h.ok("rollout", "history", "deployment/web", "--revision", "1"); !strings.Contains(out, "image: registry.local/app@sha256:v1") || strings.Contains(out, api.LabelPodTemplateHash) {
		t.Errorf("history --revision 1:\n%s", out)
	}
	if out := h.ok("rollout", "undo", "deployment/web"); !strings.Contains(out, "rolled back") {
		t.Errorf("undo: %q", out)
	}
	got, err := h.typed.AppsV1().Deployments("default").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := got.Spec.Template.Spec.Containers[0].Image; img != "registry.local/app@sha256:v1" {
		t.Errorf("after undo the image is %s", img)
	}
	if _, ok := got.Spec.Template.Labels[api.LabelPodTemplateHash]; ok {
		t.Error("undo copied the pod-template-hash label")
	}
	if _, errOut, code := h.run("rollout", "undo", "deployment/web", "--to-revision", "9"); code != 1 || !strings.Contains(errOut, "unable to find revision 9") {
		t.Errorf("undo to missing revision: %d %q", code, errOut)
	}

	if out := h.ok("rollout", "restart", "deployment", "web"); out != "deployment.apps/web restarted\n" {
		t.Errorf("restart: %q", out)
	}
	got, _ = h.typed.AppsV1().Deployments("default").Get(context.Background(), "web", metav1.GetOptions{})
	if got.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] != now.Format(time.RFC3339) {
		t.Errorf("restart annotation: %v", got.Spec.Template.Annotations)
	}

	if _, errOut, code := h.run("rollout", "status", "pod/x"); code != 1 || !strings.Contains(errOut, "deployments and daemonsets") {
		t.Errorf("rollout of a pod: %d %q", code, errOut)
	}
}

func controllerRevision(ds *appsv1.DaemonSet, rev int64, image, cause string) *appsv1.ControllerRevision {
	tmpl := ds.Spec.Template.DeepCopy()
	tmpl.Spec.Containers[0].Image = image
	raw, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
	r := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-%d", ds.Name, rev), Labels: map[string]string{"app": ds.Name},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr(true)}}},
		Data: runtime.RawExtension{Raw: raw}, Revision: rev}
	if cause != "" {
		r.Annotations = map[string]string{"kubernetes.io/change-cause": cause}
	}
	return r
}

// TestRolloutDaemonSetHistoryAndGitGuard: a DaemonSet's history and undo
// come from its ControllerRevisions; a workload applied from a GitSource
// is rolled back only with --force (the next sync would undo the undo).
func TestRolloutDaemonSetHistoryAndGitGuard(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "probe", UID: "uid-probe", Labels: map[string]string{api.LabelSource: "flotilla-system.default"}},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "probe"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "probe"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "registry.local/probe@sha256:v2"}}}}}}
	h := newHarness(t, ds, controllerRevision(ds, 1, "registry.local/probe@sha256:v1", "first"), controllerRevision(ds, 2, "registry.local/probe@sha256:v2", ""))
	out := h.ok("rollout", "history", "daemonset/probe")
	if !strings.HasPrefix(out, "daemonset.apps/probe\n") || !strings.Contains(out, "1          first") || !strings.Contains(out, "2          <none>") {
		t.Errorf("history:\n%s", out)
	}
	if out := h.ok("rollout", "history", "ds/probe", "--revision", "1"); !strings.Contains(out, "image: registry.local/probe@sha256:v1") {
		t.Errorf("history --revision 1:\n%s", out)
	}
	if _, errOut, code := h.run("rollout", "undo", "daemonset/probe"); code != 1 || !strings.Contains(errOut, "GitSource flotilla-system.default") || !strings.Contains(errOut, "--force") {
		t.Errorf("undo of a GitSource-managed daemonset without --force: exit %d %q", code, errOut)
	}
	got, _ := h.typed.AppsV1().DaemonSets("default").Get(context.Background(), "probe", metav1.GetOptions{})
	if img := got.Spec.Template.Spec.Containers[0].Image; img != "registry.local/probe@sha256:v2" {
		t.Fatalf("a refused undo changed the image to %s", img)
	}
	if out := h.ok("rollout", "undo", "daemonset/probe", "--force"); !strings.Contains(out, "daemonset.apps/probe rolled back (to the template of revision 1)") {
		t.Errorf("undo --force: %q", out)
	}
	got, _ = h.typed.AppsV1().DaemonSets("default").Get(context.Background(), "probe", metav1.GetOptions{})
	if img := got.Spec.Template.Spec.Containers[0].Image; img != "registry.local/probe@sha256:v1" || got.Annotations["kubernetes.io/change-cause"] != "first" {
		t.Errorf("after undo --force: image %s, annotations %v", img, got.Annotations)
	}
}

func TestLogs(t *testing.T) {
	p := pod("default", "web-1", "edge-1", nil)
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar"})
	h := newHarness(t, p)
	out, errOut, code := h.run("logs", "web-1", "--tail", "5")
	if code != 0 || out != "fake logs" || !strings.Contains(errOut, `Defaulted container "app" out of: app, sidecar`) {
		t.Errorf("logs: %d %q %q", code, out, errOut)
	}
	if _, errOut, code := h.run("logs", "web-1", "-c", "nope"); code != 1 || !strings.Contains(errOut, "container nope is not valid for pod web-1") {
		t.Errorf("logs -c nope: %d %q", code, errOut)
	}
	if _, errOut, code := h.run("logs", "ghost"); code != 1 || errOut != "Error from server (NotFound): pods \"ghost\" not found\n" {
		t.Errorf("logs of missing pod: %d %q", code, errOut)
	}
}

func TestLogsOfWorkload(t *testing.T) {
	ready := pod("default", "web-ready", "edge-1", map[string]string{"app": "web"})
	pending := pod("default", "web-pending", "", map[string]string{"app": "web"})
	pending.Status = corev1.PodStatus{Phase: corev1.PodPending}
	other := pod("default", "db-1", "edge-1", map[string]string{"app": "db"})
	h := newHarness(t, deployment("web", 2), ready, pending, other)
	out, errOut, code := h.run("logs", "deployment/web")
	if code != 0 || out != "fake logs" || !strings.Contains(errOut, "Found 2 pods, using pod/web-ready") {
		t.Errorf("logs deployment/web: %d %q %q", code, out, errOut)
	}
	if _, errOut, code := h.run("logs", "deploy/ghost"); code != 1 || !strings.Contains(errOut, "NotFound") {
		t.Errorf("logs of a missing deployment: %d %q", code, errOut)
	}
	if _, errOut, code := h.run("logs", "service/web"); code != 1 || !strings.Contains(errOut, "logs come from pods") {
		t.Errorf("logs of a service: %d %q", code, errOut)
	}
	if out, _, code := h.run("logs", "pod/db-1"); code != 0 || out != "fake logs" {
		t.Errorf("logs pod/db-1: %d %q", code, out)
	}
}

const appManifest = `apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  mode: quiet
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: app
        image: registry.local/app@sha256:1111111111111111111111111111111111111111111111111111111111111111
`

func TestApplyAndDelete(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "app.yaml")
	if err := os.WriteFile(file, []byte(appManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	if out := h.ok("apply", "-f", file); out != "configmap/settings created\ndeployment.apps/web created\n" {
		t.Errorf("first apply: %q", out)
	}
	if out := h.ok("apply", "-f", dir); out != "configmap/settings unchanged\ndeployment.apps/web unchanged\n" {
		t.Errorf("second apply: %q", out)
	}
	changed := strings.Replace(appManifest, "mode: quiet", "mode: loud", 1)
	changed = strings.Replace(changed, "replicas: 2", "replicas: 4", 1)
	h.stdin = changed
	if out := h.ok("apply", "-f", "-"); out != "configmap/settings configured\ndeployment.apps/web configured\n" {
		t.Errorf("changed apply: %q", out)
	}
	cm, err := h.typed.CoreV1().ConfigMaps("default").Get(context.Background(), "settings", metav1.GetOptions{})
	if err != nil || cm.Data["mode"] != "loud" || !strings.Contains(cm.Annotations[corev1.LastAppliedConfigAnnotation], "loud") {
		t.Errorf("configmap after apply: %+v %v", cm, err)
	}
	d, _ := h.typed.AppsV1().Deployments("default").Get(context.Background(), "web", metav1.GetOptions{})
	if *d.Spec.Replicas != 4 {
		t.Errorf("replicas after apply: %d", *d.Spec.Replicas)
	}

	// A key dropped from the manifest is dropped from the object.
	h.stdin = strings.Replace(changed, "  mode: loud\n", "  other: x\n", 1)
	h.ok("apply", "-f", "-")
	cm, _ = h.typed.CoreV1().ConfigMaps("default").Get(context.Background(), "settings", metav1.GetOptions{})
	if _, still := cm.Data["mode"]; still || cm.Data["other"] != "x" {
		t.Errorf("three-way merge: data %v", cm.Data)
	}

	// Objects from Git are refused without --force.
	cm.Labels = map[string]string{api.LabelSource: "flotilla-system.fleet"}
	if _, err := h.typed.CoreV1().ConfigMaps("default").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.stdin = appManifest
	out, errOut, code := h.run("apply", "-f", "-")
	if code != 1 || !strings.Contains(errOut, "is applied from GitSource flotilla-system.fleet") || !strings.Contains(out, "deployment.apps/web configured") {
		t.Errorf("apply over a Git object: %d %q %q", code, out, errOut)
	}
	if out, errOut, code := h.run("delete", "-f", file); code != 1 || !strings.Contains(errOut, "GitSource") || out != "deployment.apps \"web\" deleted\n" {
		t.Errorf("delete with a Git object: %d %q %q", code, out, errOut)
	}
	if out := h.ok("delete", "-f", file, "--force", "--ignore-not-found"); out != "configmap \"settings\" deleted\n" {
		t.Errorf("delete --force: %q", out)
	}
	if _, errOut, code := h.run("delete", "-f", file); code != 1 || !strings.Contains(errOut, `Error from server (NotFound): configmaps "settings" not found`) {
		t.Errorf("delete again: %d %q", code, errOut)
	}
	h.ok("delete", "-f", file, "--ignore-not-found")

	// Bad input says what and where.
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: v1\nkind: Widget\nmetadata: {name: w}\n"), 0o644)
	if _, errOut, code := h.run("apply", "-f", bad); code != 1 || !strings.Contains(errOut, `no matches for kind "Widget" in version "v1"`) {
		t.Errorf("unknown kind: %d %q", code, errOut)
	}
	os.WriteFile(bad, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w}\ndata: {a: b}\nspecial: 1\n"), 0o644)
	if _, errOut, code := h.run("apply", "-f", bad); code != 1 || !strings.Contains(errOut, "special") {
		t.Errorf("unknown field: %d %q", code, errOut)
	}
	os.WriteFile(bad, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w, namespace: a}\n"), 0o644)
	if _, errOut, code := h.run("apply", "-f", bad, "-n", "b"); code != 1 || !strings.Contains(errOut, "--namespace=a") {
		t.Errorf("namespace conflict: %d %q", code, errOut)
	}
}

func TestVersionAndCompletion(t *testing.T) {
	h := newHarness(t)
	h.typed.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: "v1.33.0+flotilla-0.1.0", GitCommit: "abc", GoVersion: "go1.26", Platform: "linux/amd64"}
	out := h.ok("version")
	if !strings.Contains(out, "Client Version: flotctl ") || !strings.Contains(out, "Server Version: v1.33.0+flotilla-0.1.0") {
		t.Errorf("version: %q", out)
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		if out := h.ok("completion", sh); !strings.Contains(out, "flotctl") || len(out) < 500 {
			t.Errorf("completion %s: %d bytes", sh, len(out))
		}
	}
	if _, errOut, code := h.run("completion", "tcsh"); code != 1 || !strings.Contains(errOut, "tcsh") {
		t.Errorf("completion tcsh: %d %q", code, errOut)
	}
}
