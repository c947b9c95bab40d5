package apiserver_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	autoscalingv1ac "k8s.io/client-go/applyconfigurations/autoscaling/v1"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/hub/hubtest"
)

// TestApplyScale applies the scale subresource with client-go's typed
// ApplyScale, as an autoscaler does: the manager owns spec.replicas
// through scale, conflicts with the workload's applier until it forces,
// then the applier conflicts with it; bad Scales are refused.
func TestApplyScale(t *testing.T) {
	h := hubtest.Start(t)
	c, deps := ctx(t), h.Client.AppsV1().Deployments("default")
	if _, err := deps.Apply(c, deploymentApply("web", 2, testImage), metav1.ApplyOptions{FieldManager: "alice"}); err != nil {
		t.Fatal(err)
	}
	scale := func(n int32) *autoscalingv1ac.ScaleApplyConfiguration {
		return autoscalingv1ac.Scale().WithSpec(autoscalingv1ac.ScaleSpec().WithReplicas(n))
	}
	_, err := deps.ApplyScale(c, "web", scale(5), metav1.ApplyOptions{FieldManager: "hpa"})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), `conflict with "alice"`) || !strings.Contains(err.Error(), ".spec.replicas") {
		t.Fatalf("scale apply of replicas alice applied: want 409 naming alice and .spec.replicas, got %v", err)
	}
	sc, err := deps.ApplyScale(c, "web", scale(5), metav1.ApplyOptions{FieldManager: "hpa", Force: true})
	if err != nil || sc.Spec.Replicas != 5 || sc.Name != "web" || sc.Status.Selector != "app=web" {
		t.Fatalf("forced scale apply: %v %+v", err, sc)
	}
	d, err := deps.Get(c, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 5 || !owns(t, d, "hpa/Apply/scale", "spec", "replicas") || owns(t, d, "hpa/Apply/scale", "spec", "template") ||
		owns(t, d, "alice/Apply", "spec", "replicas") || !owns(t, d, "alice/Apply", "spec", "selector") {
		t.Fatalf("after the scale apply, hpa must own replicas alone through scale and alice the rest: replicas %d, %v", *d.Spec.Replicas, managers(t, d))
	}
	_, err = deps.Apply(c, deploymentApply("web", 2, testImage), metav1.ApplyOptions{FieldManager: "alice"})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), `conflict with "hpa" with subresource "scale": .spec.replicas`) {
		t.Fatalf("apply of the replicas hpa applied through scale: want 409 naming hpa's scale, got %v", err)
	}
	// hpa owns them now: no force needed; dry run writes nothing.
	if sc, err = deps.ApplyScale(c, "web", scale(7), metav1.ApplyOptions{FieldManager: "hpa", DryRun: []string{metav1.DryRunAll}}); err != nil || sc.Spec.Replicas != 7 {
		t.Fatalf("dry-run scale apply: %v %+v", err, sc)
	}
	if d, _ = deps.Get(c, "web", metav1.GetOptions{}); *d.Spec.Replicas != 5 {
		t.Fatalf("a dry-run scale apply wrote replicas %d", *d.Spec.Replicas)
	}
	if sc, err = deps.ApplyScale(c, "web", scale(3), metav1.ApplyOptions{FieldManager: "hpa"}); err != nil || sc.Spec.Replicas != 3 {
		t.Fatalf("scale apply by the owner: %v %+v", err, sc)
	}
	// A stale resourceVersion is a precondition that fails.
	if _, err = deps.ApplyScale(c, "web", scale(4).WithResourceVersion("1"), metav1.ApplyOptions{FieldManager: "hpa"}); !apierrors.IsConflict(err) {
		t.Errorf("scale apply naming a stale resourceVersion: want 409, got %v", err)
	}
	// ReplicaSets serve it too; a missing workload is 404.
	rs := h.Client.AppsV1().ReplicaSets("default")
	if _, err := deps.ApplyScale(c, "nope", scale(1), metav1.ApplyOptions{FieldManager: "hpa"}); !apierrors.IsNotFound(err) {
		t.Errorf("scale apply of a missing deployment: want 404, got %v", err)
	}
	if _, err := rs.ApplyScale(c, "nope", scale(1), metav1.ApplyOptions{FieldManager: "hpa"}); !apierrors.IsNotFound(err) {
		t.Errorf("scale apply of a missing replicaset: want 404, got %v", err)
	}

	for _, tc := range []struct {
		body string
		is   func(error) bool
		want string
	}{
		{"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 1}\n", apierrors.IsBadRequest, "set apiVersion: autoscaling/v1 and kind: Scale"},
		{"apiVersion: autoscaling/v1\nkind: Scale\nmetadata: {name: other}\nspec: {replicas: 1}\n", apierrors.IsBadRequest, "does not match the name on the URL"},
		{"apiVersion: autoscaling/v1\nkind: Scale\nspec: {replicas: 1, replica: 2}\n", apierrors.IsBadRequest, "replica"},
		{"apiVersion: autoscaling/v1\nkind: Scale\nspec: {replicas: -1}\n", apierrors.IsInvalid, "spec.replicas"},
		{"{", apierrors.IsBadRequest, "error decoding YAML"},
	} {
		_, err := deps.Patch(c, "web", types.ApplyYAMLPatchType, []byte(tc.body), metav1.PatchOptions{FieldManager: "hpa"}, "scale")
		if !tc.is(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("scale apply of %q: want an error with %q, got %v", tc.body, tc.want, err)
		}
	}
	if _, err := deps.Patch(c, "web", types.ApplyYAMLPatchType, []byte("apiVersion: autoscaling/v1\nkind: Scale\nspec: {replicas: 1}\n"), metav1.PatchOptions{}, "scale"); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "fieldManager: Required value") {
		t.Errorf("scale apply without a fieldManager: want 422, got %v", err)
	}
}

// contentTypes records the Content-Type of every PATCH a client sends.
type contentTypes struct {
	rt   http.RoundTripper
	mu   sync.Mutex
	seen []string
}

func (c *contentTypes) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPatch {
		c.mu.Lock()
		c.seen = append(c.seen, r.Header.Get("Content-Type"))
		c.mu.Unlock()
	}
	return c.rt.RoundTrip(r)
}

// TestApplyCBOR applies with client-go preferring CBOR, which then sends
// the applied configuration as application/apply-patch+cbor (its
// ClientsAllowCBOR and ClientsPreferCBOR gates), on a workload and on its
// scale; a body that is not CBOR is a 400.
func TestApplyCBOR(t *testing.T) {
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.ClientsAllowCBOR, true)
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.ClientsPreferCBOR, true)
	h := hubtest.Start(t)
	c := ctx(t)
	cfg := rest.CopyConfig(h.Config)
	rec := &contentTypes{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { rec.rt = rt; return rec })
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deps := cs.AppsV1().Deployments("default")
	nextImage := strings.Replace(testImage, "sha256:0123", "sha256:4567", 1)
	d, err := deps.Apply(c, deploymentApply("web", 2, testImage), metav1.ApplyOptions{FieldManager: "alice"})
	if err != nil || *d.Spec.Replicas != 2 || d.Spec.Template.Spec.Containers[0].Image != testImage || !owns(t, d, "alice/Apply", "spec", "replicas") {
		t.Fatalf("CBOR apply (create): %v %+v", err, d)
	}
	d, err = deps.Apply(c, deploymentApply("web", 2, nextImage), metav1.ApplyOptions{FieldManager: "alice"})
	if err != nil || d.Spec.Template.Spec.Containers[0].Image != nextImage {
		t.Fatalf("CBOR apply (change): %v %+v", err, d)
	}
	sc, err := deps.ApplyScale(c, "web", autoscalingv1ac.Scale().WithSpec(autoscalingv1ac.ScaleSpec().WithReplicas(4)), metav1.ApplyOptions{FieldManager: "hpa", Force: true})
	if err != nil || sc.Spec.Replicas != 4 {
		t.Fatalf("CBOR scale apply: %v %+v", err, sc)
	}
	rec.mu.Lock()
	seen := strings.Join(rec.seen, ",")
	rec.mu.Unlock()
	if want := "application/apply-patch+cbor,application/apply-patch+cbor,application/apply-patch+cbor"; seen != want {
		t.Errorf("the client sent %s, want CBOR applies only (no fallback to YAML)", seen)
	}
	_, err = h.Client.AppsV1().Deployments("default").Patch(c, "web", types.ApplyCBORPatchType, []byte("apiVersion: apps/v1\n"), metav1.PatchOptions{FieldManager: "alice"})
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "error decoding CBOR") {
		t.Errorf("YAML sent as CBOR: want 400, got %v", err)
	}
}
