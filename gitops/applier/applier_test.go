package applier

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/gitops/loader"
	"flotilla.dev/flotilla/hub/hubtest"
)

const src = "flotilla-system.test"

func objects(t *testing.T, files map[string]string) []loader.Object {
	t.Helper()
	fsys := fstest.MapFS{}
	for p, c := range files {
		fsys[p] = &fstest.MapFile{Data: []byte(c)}
	}
	objs, err := loader.Load(fsys, nil)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

type env struct {
	t   *testing.T
	h   *hubtest.Hub
	a   *Applier
	inv []v1alpha1.InventoryEntry
}

func newEnv(t *testing.T) *env {
	h := hubtest.Start(t)
	dyn, err := dynamic.NewForConfig(h.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, h: h, a: New(dyn)}
}

func (e *env) apply(commit string, files map[string]string, opts ...func(*Request)) (Result, error) {
	e.t.Helper()
	req := Request{Source: src, Commit: commit, Objects: objects(e.t, files), Inventory: e.inv, Prune: true}
	for _, o := range opts {
		o(&req)
	}
	res, err := e.a.Apply(context.Background(), req)
	e.inv = res.Inventory
	return res, err
}

func (e *env) mustApply(commit string, files map[string]string, want Result) {
	e.t.Helper()
	res, err := e.apply(commit, files)
	if err != nil {
		e.t.Fatalf("apply %s: %v", commit, err)
	}
	if res.Created != want.Created || res.Updated != want.Updated || res.Pruned != want.Pruned || res.Unchanged != want.Unchanged {
		e.t.Fatalf("apply %s: created/updated/pruned/unchanged = %d/%d/%d/%d, want %d/%d/%d/%d", commit,
			res.Created, res.Updated, res.Pruned, res.Unchanged, want.Created, want.Updated, want.Pruned, want.Unchanged)
	}
}

const (
	nsShop = "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n"
	cmApp  = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: shop}\ndata: {color: blue}\n"
	svc    = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\nspec:\n  selector: {app: web}\n  ports: [{port: 80}]\n"
	secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: creds, namespace: shop}\nstringData: {password: s3cr3t-value}\n"
)

func TestApplyUpdatePruneAndNoOp(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	files := map[string]string{"ns.yaml": nsShop, "cm.yaml": cmApp, "svc.yaml": svc, "secret.yaml": secret}
	e.mustApply("c1", files, Result{Created: 4})

	cm, err := e.h.Client.CoreV1().ConfigMaps("shop").Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Labels[api.LabelSource] != src || cm.Annotations[api.AnnotationSourceCommit] != "c1" {
		t.Fatalf("marks: labels %v annotations %v", cm.Labels, cm.Annotations)
	}
	s, err := e.h.Client.CoreV1().Secrets("shop").Get(ctx, "creds", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Data["password"]) != "s3cr3t-value" {
		t.Fatalf("secret data %q", s.Data["password"])
	}
	for k, v := range s.Annotations {
		if strings.Contains(v, "s3cr3t") || strings.Contains(v, "czNjcjN0") {
			t.Fatalf("the secret's value is in annotation %s", k)
		}
	}
	sv, _ := e.h.Client.CoreV1().Services("shop").Get(ctx, "web", metav1.GetOptions{})
	ip, rvs := sv.Spec.ClusterIP, resourceVersions(t, e)

	// The same revision again, under a new commit: nothing is written.
	e.mustApply("c2", files, Result{Unchanged: 4})
	if got := resourceVersions(t, e); !equal(got, rvs) {
		t.Fatalf("resourceVersions changed on a no-op apply: %v → %v", rvs, got)
	}

	// Hand edits: a field the source set is put back, another label stays.
	cm.Data["color"] = "green"
	cm.Labels["team"] = "ops"
	if _, err := e.h.Client.CoreV1().ConfigMaps("shop").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.mustApply("c2", files, Result{Updated: 1, Unchanged: 3})
	cm, _ = e.h.Client.CoreV1().ConfigMaps("shop").Get(ctx, "app", metav1.GetOptions{})
	if cm.Data["color"] != "blue" || cm.Labels["team"] != "ops" {
		t.Fatalf("after drift correction: data %v labels %v", cm.Data, cm.Labels)
	}

	// A change, and a field dropped from the manifest is removed.
	files["cm.yaml"] = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: shop}\ndata: {size: L}\n"
	e.mustApply("c3", files, Result{Updated: 1, Unchanged: 3})
	cm, _ = e.h.Client.CoreV1().ConfigMaps("shop").Get(ctx, "app", metav1.GetOptions{})
	if _, ok := cm.Data["color"]; ok || cm.Data["size"] != "L" || cm.Annotations[api.AnnotationSourceCommit] != "c3" {
		t.Fatalf("after the change: data %v annotations %v", cm.Data, cm.Annotations)
	}
	sv, _ = e.h.Client.CoreV1().Services("shop").Get(ctx, "web", metav1.GetOptions{})
	if sv.Spec.ClusterIP != ip || sv.Annotations[api.AnnotationSourceCommit] != "c1" {
		t.Fatalf("service: clusterIP %s (was %s), commit %s", sv.Spec.ClusterIP, ip, sv.Annotations[api.AnnotationSourceCommit])
	}

	// Removed from the revision: pruned. An object of the source that is
	// not in the inventory is never touched.
	stray, _ := e.h.Client.CoreV1().ConfigMaps("shop").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "stray", Namespace: "shop", Labels: map[string]string{api.LabelSource: src}}}, metav1.CreateOptions{})
	delete(files, "secret.yaml")
	e.mustApply("c4", files, Result{Pruned: 1, Unchanged: 3})
	if _, err := e.h.Client.CoreV1().Secrets("shop").Get(ctx, "creds", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pruned secret: %v", err)
	}
	if _, err := e.h.Client.CoreV1().ConfigMaps("shop").Get(ctx, stray.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("an object outside the inventory was deleted: %v", err)
	}

	// An empty revision prunes nothing unless allowed.
	_, err = e.apply("c5", map[string]string{})
	var es loader.Errors
	if !errors.As(err, &es) || !errors.Is(es[0], es[0]) || !strings.Contains(err.Error(), "allowEmpty") {
		t.Fatalf("empty revision: %v", err)
	}
	if _, err := e.h.Client.CoreV1().ConfigMaps("shop").Get(ctx, "app", metav1.GetOptions{}); err != nil {
		t.Fatalf("an empty revision pruned: %v", err)
	}
}

func TestApplyIsAllOrNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.mustApply("c1", map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: keep}\ndata: {v: \"1\"}\n"}, Result{Created: 1})
	before := e.inv
	_, err := e.apply("c2", map[string]string{
		"cm.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: keep}\ndata: {v: \"2\"}\n",
		"new.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: new}\n",
		"pod.yaml":  "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: reg.example/app@sha256:" + strings.Repeat("a", 64) + ", bogusField: 1}]\n",
		"bad.yaml":  "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 70000}]}\n",
		"kind.yaml": "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: j}\n",
		"dup.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: new, namespace: default}\n",
	})
	var es loader.Errors
	if !errors.As(err, &es) {
		t.Fatalf("err = %v, want loader.Errors", err)
	}
	msg := err.Error()
	for _, want := range []string{"kind.yaml:1: PodDisruptionBudget j: unknown kind", "new.yaml:1: ConfigMap default/new: duplicate object: also defined at dup.yaml:1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors do not say %q: %s", want, msg)
		}
	}
	// The semantic problems stop the revision before any dry run; fix
	// them to see the server's refusals.
	_, err = e.apply("c3", map[string]string{
		"cm.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: keep}\ndata: {v: \"2\"}\n",
		"new.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: new}\n",
		"pod.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: reg.example/app@sha256:" + strings.Repeat("a", 64) + ", bogusField: 1}]\n",
		"bad.yaml": "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 70000}]}\n",
		"tag.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: tagged}\nspec:\n  containers: [{name: c, image: reg.example/app:latest}]\n",
	})
	if !errors.As(err, &es) || len(es) != 3 {
		t.Fatalf("err = %v, want 3 errors", err)
	}
	for i, f := range []string{"bad.yaml", "pod.yaml", "tag.yaml"} {
		if es[i].File != f || es[i].Line != 1 {
			t.Errorf("error %d at %s:%d, want %s:1: %v", i, es[i].File, es[i].Line, f, es[i])
		}
	}
	cm, _ := e.h.Client.CoreV1().ConfigMaps("default").Get(ctx, "keep", metav1.GetOptions{})
	if cm.Data["v"] != "1" {
		t.Errorf("a refused revision changed an object: %v", cm.Data)
	}
	if _, err := e.h.Client.CoreV1().ConfigMaps("default").Get(ctx, "new", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a refused revision created an object: %v", err)
	}
	if len(e.inv) != len(before) {
		t.Errorf("inventory changed: %v", e.inv)
	}
}

func TestApplyRefusesOthersObjectsAndHonoursOptOut(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.h.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mine"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := e.apply("c1", map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: mine}\n"})
	if err == nil || !strings.Contains(err.Error(), "not created by this source") {
		t.Fatalf("err = %v", err)
	}

	files := map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: opt}\ndata: {v: a}\n"}
	e.mustApply("c1", files, Result{Created: 1})
	cm, _ := e.h.Client.CoreV1().ConfigMaps("default").Get(ctx, "opt", metav1.GetOptions{})
	cm.Annotations[api.AnnotationReconcile] = ReconcileDisabled
	cm.Data["v"] = "hand"
	if _, err := e.h.Client.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	files["cm.yaml"] = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: opt}\ndata: {v: b}\n"
	e.mustApply("c2", files, Result{Unchanged: 1})
	e.mustApply("c3", map[string]string{"other.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n"}, Result{Created: 1})
	cm, err = e.h.Client.CoreV1().ConfigMaps("default").Get(ctx, "opt", metav1.GetOptions{})
	if err != nil || cm.Data["v"] != "hand" {
		t.Fatalf("an opted-out object was changed or pruned: %v %v", cm.Data, err)
	}
}

func resourceVersions(t *testing.T, e *env) map[string]string {
	t.Helper()
	out := map[string]string{}
	ctx := context.Background()
	for _, inv := range e.inv {
		k, r, _ := inventoryKey(inv)
		u, err := e.a.client(r, k.Namespace).Get(ctx, k.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out[k.String()] = u.GetResourceVersion()
	}
	return out
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A RolloutPolicy's spec.paused, set by flotctl rollout pause, survives
// the syncs of a manifest that leaves it out; a manifest that sets it owns
// it.
func TestPauseOutsideTheManifestSurvivesSyncs(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	policy := func(readySeconds int, extra string) string {
		return fmt.Sprintf("apiVersion: flotilla.dev/v1alpha1\nkind: RolloutPolicy\nmetadata: {name: kiosks, namespace: shop}\nspec:\n"+
			"  selector: {matchLabels: {app: kiosk}}\n  waves: [{name: canary, percent: 10}, {name: rest}]\n"+
			"  successCriteria: {readySeconds: %d}\n%s", readySeconds, extra)
	}
	dyn, err := dynamic.NewForConfig(e.h.Config)
	if err != nil {
		t.Fatal(err)
	}
	rps := dyn.Resource(v1alpha1.SchemeGroupVersion.WithResource("rolloutpolicies")).Namespace("shop")
	paused := func() bool {
		t.Helper()
		u, err := rps.Get(ctx, "kiosks", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p, _, _ := unstructured.NestedBool(u.Object, "spec", "paused")
		return p
	}
	e.mustApply("c1", map[string]string{"ns.yaml": nsShop, "rp.yaml": policy(60, "")}, Result{Created: 2})
	if _, err := rps.Patch(ctx, "kiosks", types.MergePatchType, []byte(`{"spec":{"paused":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.mustApply("c2", map[string]string{"ns.yaml": nsShop, "rp.yaml": policy(30, "")}, Result{Updated: 1, Unchanged: 1})
	if !paused() {
		t.Fatal("a sync that changed another field unpaused the policy")
	}
	e.mustApply("c3", map[string]string{"ns.yaml": nsShop, "rp.yaml": policy(30, "  paused: false\n")}, Result{Updated: 1, Unchanged: 1})
	if paused() {
		t.Fatal("Git says paused: false, and the policy stayed paused")
	}
}
