package apiserver_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"flotilla.dev/flotilla/hub/hubtest"
)

// managers maps each manager (and operation, and subresource) of obj's
// managedFields to the fields it owns.
func managers(t *testing.T, obj metav1.Object) map[string]*fieldpath.Set {
	t.Helper()
	out := map[string]*fieldpath.Set{}
	for _, e := range obj.GetManagedFields() {
		s := &fieldpath.Set{}
		if err := s.FromJSON(strings.NewReader(string(e.FieldsV1.Raw))); err != nil {
			t.Fatalf("managedFields of %s: %v", e.Manager, err)
		}
		key := e.Manager + "/" + string(e.Operation)
		if e.Subresource != "" {
			key += "/" + e.Subresource
		}
		out[key] = s
	}
	return out
}

func owns(t *testing.T, obj metav1.Object, manager string, path ...any) bool {
	t.Helper()
	s, ok := managers(t, obj)[manager]
	return ok && s.Has(fieldpath.MakePathOrDie(path...))
}

func deploymentApply(name string, replicas int32, image string) *appsv1ac.DeploymentApplyConfiguration {
	l := map[string]string{"app": name}
	return appsv1ac.Deployment(name, "default").WithSpec(appsv1ac.DeploymentSpec().
		WithReplicas(replicas).
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(l)).
		WithTemplate(corev1ac.PodTemplateSpec().WithLabels(l).WithSpec(corev1ac.PodSpec().
			WithContainers(corev1ac.Container().WithName("app").WithImage(image)))))
}

// TestApplyWithTypedClient applies with client-go's typed Apply (apply
// configurations): it creates, records the manager's fields, merges by
// ownership, refuses another manager's change with a 409 naming the owner
// and the field, takes it with force, and gives up the fields the manager
// no longer applies.
func TestApplyWithTypedClient(t *testing.T) {
	h := hubtest.Start(t)
	c, deps := ctx(t), h.Client.AppsV1().Deployments("default")

	d, err := deps.Apply(c, deploymentApply("web", 2, testImage), metav1.ApplyOptions{FieldManager: "alice"})
	if err != nil {
		t.Fatalf("apply (create): %v", err)
	}
	if d.UID == "" || *d.Spec.Replicas != 2 || d.Spec.Template.Spec.Containers[0].ImagePullPolicy != corev1.PullIfNotPresent {
		t.Fatalf("apply did not create a defaulted deployment: %+v", d)
	}
	if !owns(t, d, "alice/Apply", "spec", "replicas") || !owns(t, d, "alice/Apply", "spec", "template", "spec", "containers", fieldpath.KeyByFields("name", "app"), "image") {
		t.Fatalf("alice does not own what she applied: %v", managers(t, d))
	}
	if owns(t, d, "alice/Apply", "status") {
		t.Errorf("an apply to the main resource owns status: %v", managers(t, d))
	}

	// Bob takes replicas by an update (as kubectl scale or an autoscaler).
	d.Spec.Replicas = ptr[int32](5)
	d, err = deps.Update(c, d, metav1.UpdateOptions{FieldManager: "bob"})
	if err != nil {
		t.Fatalf("update by bob: %v", err)
	}
	if !owns(t, d, "bob/Update", "spec", "replicas") || owns(t, d, "alice/Apply", "spec", "replicas") {
		t.Fatalf("after bob's update, bob must own replicas alone: %v", managers(t, d))
	}

	// Alice applying another replicas conflicts with bob.
	_, err = deps.Apply(c, deploymentApply("web", 3, testImage), metav1.ApplyOptions{FieldManager: "alice"})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), `conflict with "bob" using apps/v1: .spec.replicas`) {
		t.Fatalf("apply of a field bob owns: want 409 naming bob and .spec.replicas, got %v", err)
	}
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.ErrStatus.Details == nil || len(se.ErrStatus.Details.Causes) != 1 || se.ErrStatus.Details.Causes[0].Field != ".spec.replicas" {
		t.Errorf("the conflict's causes must name the field: %+v", se)
	}
	// Applying the value bob set is no conflict: both own it then.
	d, err = deps.Apply(c, deploymentApply("web", 5, testImage), metav1.ApplyOptions{FieldManager: "alice"})
	if err != nil || !owns(t, d, "alice/Apply", "spec", "replicas") || !owns(t, d, "bob/Update", "spec", "replicas") {
		t.Fatalf("applying bob's value: %v %v", err, d)
	}
	// Force takes it.
	d, err = deps.Apply(c, deploymentApply("web", 3, testImage), metav1.ApplyOptions{FieldManager: "alice", Force: true})
	if err != nil || *d.Spec.Replicas != 3 || owns(t, d, "bob/Update", "spec", "replicas") {
		t.Fatalf("forced apply: %v %v", err, d)
	}

	// A field alice stops applying is removed; one another manager also
	// set stays.
	ac := deploymentApply("web", 3, testImage)
	ac.Spec.Template.Spec.Containers[0].WithPorts(corev1ac.ContainerPort().WithContainerPort(8080))
	d, err = deps.Apply(c, ac, metav1.ApplyOptions{FieldManager: "alice"})
	if err != nil || len(d.Spec.Template.Spec.Containers[0].Ports) != 1 {
		t.Fatalf("apply adding a port: %v", err)
	}
	d, err = deps.Apply(c, deploymentApply("web", 3, testImage), metav1.ApplyOptions{FieldManager: "alice"})
	if err != nil || len(d.Spec.Template.Spec.Containers[0].Ports) != 0 {
		t.Fatalf("a port alice no longer applies must go: %v %v", err, d.Spec.Template.Spec.Containers[0].Ports)
	}

	// dryRun answers what would be and writes nothing.
	dry, err := deps.Apply(c, deploymentApply("web", 7, testImage), metav1.ApplyOptions{FieldManager: "alice", DryRun: []string{metav1.DryRunAll}})
	if err != nil || *dry.Spec.Replicas != 7 {
		t.Fatalf("dry-run apply: %v %v", err, dry)
	}
	if got, _ := deps.Get(c, "web", metav1.GetOptions{}); *got.Spec.Replicas != 3 || got.ResourceVersion != d.ResourceVersion {
		t.Fatalf("a dry-run apply wrote: replicas %d rv %s (was %s)", *got.Spec.Replicas, got.ResourceVersion, d.ResourceVersion)
	}
	if _, err := deps.Apply(c, deploymentApply("fresh", 1, testImage), metav1.ApplyOptions{FieldManager: "alice", DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("dry-run apply of a new object: %v", err)
	}
	if _, err := deps.Get(c, "fresh", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a dry-run apply created the object: %v", err)
	}

	// A resourceVersion in the applied configuration is a precondition.
	stale := deploymentApply("web", 4, testImage).WithResourceVersion("1")
	if _, err := deps.Apply(c, stale, metav1.ApplyOptions{FieldManager: "alice"}); !apierrors.IsConflict(err) {
		t.Errorf("apply naming a stale resourceVersion: want 409, got %v", err)
	}
	cur := deploymentApply("web", 4, testImage).WithResourceVersion(d.ResourceVersion)
	if _, err := deps.Apply(c, cur, metav1.ApplyOptions{FieldManager: "alice"}); err != nil {
		t.Errorf("apply naming the current resourceVersion: %v", err)
	}
}

// TestApplyStatusSubresource applies status through the status
// subresource: the manager owns status fields there, recorded with
// subresource "status", and the spec is untouched.
func TestApplyStatusSubresource(t *testing.T) {
	h := hubtest.Start(t)
	c, deps := ctx(t), h.Client.AppsV1().Deployments("default")
	if _, err := deps.Apply(c, deploymentApply("web", 2, testImage), metav1.ApplyOptions{FieldManager: "alice"}); err != nil {
		t.Fatal(err)
	}
	st := appsv1ac.Deployment("web", "default").WithStatus(appsv1ac.DeploymentStatus().WithReplicas(2).WithReadyReplicas(1))
	d, err := deps.ApplyStatus(c, st, metav1.ApplyOptions{FieldManager: "ctrl"})
	if err != nil {
		t.Fatalf("apply status: %v", err)
	}
	if d.Status.ReadyReplicas != 1 || *d.Spec.Replicas != 2 {
		t.Fatalf("status apply: %+v %+v", d.Status, d.Spec)
	}
	if !owns(t, d, "ctrl/Apply/status", "status", "readyReplicas") || owns(t, d, "ctrl/Apply/status", "spec") {
		t.Fatalf("ctrl must own the status it applied, through status: %v", managers(t, d))
	}
	// A spec in a status apply is not the status subresource's to change.
	st = appsv1ac.Deployment("web", "default").WithSpec(appsv1ac.DeploymentSpec().WithReplicas(9)).WithStatus(appsv1ac.DeploymentStatus().WithReplicas(2).WithReadyReplicas(1))
	d, err = deps.ApplyStatus(c, st, metav1.ApplyOptions{FieldManager: "ctrl"})
	if err != nil || *d.Spec.Replicas != 2 || owns(t, d, "ctrl/Apply/status", "spec", "replicas") {
		t.Fatalf("a status apply changed or took spec: %v %v", err, d)
	}
	// Status applied to the main resource is not kept, nor owned.
	d, err = deps.Apply(c, deploymentApply("web", 2, testImage).WithStatus(appsv1ac.DeploymentStatus().WithReadyReplicas(0)), metav1.ApplyOptions{FieldManager: "alice"})
	if err != nil || d.Status.ReadyReplicas != 1 || owns(t, d, "alice/Apply", "status", "readyReplicas") {
		t.Fatalf("status applied through the main resource: %v %v", err, d)
	}
}

// TestManagedFieldsOfCreateUpdatePatch: create, update and the three
// non-apply patches record their managers with operation Update, from
// fieldManager or else the user agent, and a no-op update writes nothing.
func TestManagedFieldsOfCreateUpdatePatch(t *testing.T) {
	h := hubtest.Start(t)
	c, cms := ctx(t), h.Client.CoreV1().ConfigMaps("default")
	cm, err := cms.Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"a": "1"}}, metav1.CreateOptions{FieldManager: "creator"})
	if err != nil {
		t.Fatal(err)
	}
	if !owns(t, cm, "creator/Update", "data", "a") {
		t.Fatalf("create must record its manager: %v", managers(t, cm))
	}
	cm.Data["b"] = "2"
	cm, err = cms.Update(c, cm, metav1.UpdateOptions{FieldManager: "updater"})
	if err != nil || !owns(t, cm, "updater/Update", "data", "b") || owns(t, cm, "updater/Update", "data", "a") || !owns(t, cm, "creator/Update", "data", "a") {
		t.Fatalf("update: %v %v", err, managers(t, cm))
	}
	rv := cm.ResourceVersion
	cm, err = cms.Update(c, cm, metav1.UpdateOptions{FieldManager: "updater"})
	if err != nil || cm.ResourceVersion != rv {
		t.Fatalf("a no-op update must not write: %v rv %s → %s", err, rv, cm.ResourceVersion)
	}
	for _, p := range []struct {
		manager string
		pt      types.PatchType
		body    string
		key     string
	}{
		{"merger", types.MergePatchType, `{"data":{"c":"3"}}`, "c"},
		{"strategic", types.StrategicMergePatchType, `{"data":{"d":"4"}}`, "d"},
		{"jsonpatcher", types.JSONPatchType, `[{"op":"add","path":"/data/e","value":"5"}]`, "e"},
	} {
		cm, err = cms.Patch(c, "cfg", p.pt, []byte(p.body), metav1.PatchOptions{FieldManager: p.manager})
		if err != nil || !owns(t, cm, p.manager+"/Update", "data", p.key) {
			t.Fatalf("%s patch: %v %v", p.pt, err, managers(t, cm))
		}
	}
	// Without fieldManager, the user agent's product names the manager.
	cfg := rest.CopyConfig(h.Config)
	cfg.UserAgent = "my-operator/v1.2 (linux/amd64)"
	op, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cm, err = op.CoreV1().ConfigMaps("default").Patch(c, "cfg", types.MergePatchType, []byte(`{"data":{"f":"6"}}`), metav1.PatchOptions{})
	if err != nil || !owns(t, cm, "my-operator/Update", "data", "f") {
		t.Fatalf("the user agent must name the manager: %v %v", err, managers(t, cm))
	}
	// Force is for applies only; an apply needs a fieldManager.
	if _, err := cms.Patch(c, "cfg", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{Force: ptr(true)}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "force: Forbidden: may not be specified for non-apply patch") {
		t.Errorf("force on a merge patch: %v", err)
	}
	if _, err := cms.Patch(c, "cfg", types.ApplyYAMLPatchType, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n"), metav1.PatchOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "fieldManager: Required value: is required for apply patch") {
		t.Errorf("apply without fieldManager: %v", err)
	}
}

// TestApplyBadInput: what an apply cannot be is refused with a 4xx that
// says what to fix.
func TestApplyBadInput(t *testing.T) {
	h := hubtest.Start(t)
	c, cms := ctx(t), h.Client.CoreV1().ConfigMaps("default")
	for _, tc := range []struct{ body, want string }{
		{"apiVersion: v1\nkind: Secret\nmetadata: {name: cfg}\n", `kind "Secret"`},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n", "does not match the name on the URL"},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndatta: {a: b}\n", "datta"},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: [1]\n", "data"},
		{"{", "error decoding YAML"},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, managedFields: [{manager: x}]}\n", "managedFields must be nil"},
	} {
		_, err := cms.Patch(c, "cfg", types.ApplyYAMLPatchType, []byte(tc.body), metav1.PatchOptions{FieldManager: "m"})
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("apply of %q: want 400 with %q, got %v", tc.body, tc.want, err)
		}
	}
	if _, err := cms.Get(c, "cfg", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a refused apply created the object: %v", err)
	}
}

// TestScaleOwnsReplicas: a write through the scale subresource (an
// autoscaler, kubectl scale) takes ownership of spec.replicas alone,
// recorded with subresource "scale", so an apply of other replicas
// conflicts with it.
func TestScaleOwnsReplicas(t *testing.T) {
	h := hubtest.Start(t)
	c, deps := ctx(t), h.Client.AppsV1().Deployments("default")
	if _, err := deps.Apply(c, deploymentApply("web", 2, testImage), metav1.ApplyOptions{FieldManager: "alice"}); err != nil {
		t.Fatal(err)
	}
	sc, err := deps.GetScale(c, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sc.Spec.Replicas = 6
	if _, err := deps.UpdateScale(c, "web", sc, metav1.UpdateOptions{FieldManager: "hpa"}); err != nil {
		t.Fatal(err)
	}
	d, err := deps.Get(c, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !owns(t, d, "hpa/Update/scale", "spec", "replicas") || owns(t, d, "hpa/Update/scale", "spec", "template") || owns(t, d, "alice/Apply", "spec", "replicas") {
		t.Fatalf("after a scale, hpa must own replicas alone: %v", managers(t, d))
	}
	_, err = deps.Apply(c, deploymentApply("web", 2, testImage), metav1.ApplyOptions{FieldManager: "alice"})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), `conflict with "hpa" with subresource "scale" using apps/v1: .spec.replicas`) {
		t.Fatalf("apply of the replicas hpa scaled: want 409 naming hpa's scale, got %v", err)
	}
}

// TestManagedFieldsDroppedWhenTooLarge: a create or update whose
// managedFields alone would make the object larger than an object may be
// is stored without them, as kube-apiserver does, instead of failing.
func TestManagedFieldsDroppedWhenTooLarge(t *testing.T) {
	h := hubtest.Start(t)
	c, cms := ctx(t), h.Client.CoreV1().ConfigMaps("default")
	// ~830 KB of data in 25,000 keys: their managedFields add ~375 KB.
	data := map[string]string{}
	for i := range 25000 {
		data[fmt.Sprintf("k%06d", i)] = strings.Repeat("v", 20)
	}
	cm, err := cms.Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "big"}, Data: data}, metav1.CreateOptions{FieldManager: "m"})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if len(cm.ManagedFields) != 0 {
		t.Errorf("the create kept %d managedFields entries past the object size limit", len(cm.ManagedFields))
	}
	cm.Data["k000000"] = "changed"
	if cm, err = cms.Update(c, cm, metav1.UpdateOptions{FieldManager: "m"}); err != nil || cm.Data["k000000"] != "changed" {
		t.Fatalf("update: %v", err)
	}
	// A small object keeps them.
	small, err := cms.Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "small"}, Data: map[string]string{"a": "b"}}, metav1.CreateOptions{FieldManager: "m"})
	if err != nil || len(small.ManagedFields) != 1 {
		t.Fatalf("small create: %v %v", err, small.ManagedFields)
	}
}

// TestApplyCreatesEvent: Events, which update creates when absent, are
// created by an apply too.
func TestApplyCreatesEvent(t *testing.T) {
	h := hubtest.Start(t)
	c := ctx(t)
	ev := corev1ac.Event("e1", "default").WithReason("Tested").WithMessage("by apply").WithType("Normal").
		WithInvolvedObject(corev1ac.ObjectReference().WithKind("Pod").WithName("p").WithNamespace("default"))
	got, err := h.Client.CoreV1().Events("default").Apply(c, ev, metav1.ApplyOptions{FieldManager: "m"})
	if err != nil || got.Reason != "Tested" || !owns(t, got, "m/Apply", "message") {
		t.Fatalf("apply of an Event: %v %v", err, got)
	}
}
