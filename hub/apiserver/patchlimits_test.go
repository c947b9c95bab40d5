package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub/hubtest"
)

// copyBomb is a JSON patch of 17 operations in about 3.4 KB: a 2.2 KB
// finalizer, then 16 copies of the finalizers into themselves, each
// doubling them (2.2 KB × 2^16, about 150 MB of JSON).
func copyBomb() []byte {
	ops := []map[string]any{{"op": "add", "path": "/metadata/finalizers", "value": []string{strings.Repeat("x", 2200)}}}
	for range 16 {
		ops = append(ops, map[string]any{"op": "copy", "from": "/metadata/finalizers", "path": "/metadata/finalizers/-"})
	}
	b, _ := json.Marshal(ops)
	return b
}

// A device patching its own Lease with the copy bomb is refused at once
// (422: the copies are bounded) and the hub allocates little; a normal
// JSON patch still works.
func TestJSONPatchCopyBomb(t *testing.T) {
	h := hubtest.Start(t)
	deviceLease(t, h, "dev-1")
	leases := h.NodeClient("dev-1").CoordinationV1().Leases(api.NamespaceNodeLease)
	c, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	bomb := copyBomb()
	if len(bomb) > 3500 {
		t.Fatalf("the bomb is %d bytes", len(bomb))
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, err := leases.Patch(c, "dev-1", types.JSONPatchType, bomb, metav1.PatchOptions{})
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("the copy bomb: %v after %v, %d MB allocated", err, took.Round(time.Millisecond), allocated>>20)
	if se, ok := err.(*apierrors.StatusError); !ok || (se.ErrStatus.Code != http.StatusUnprocessableEntity && se.ErrStatus.Code != http.StatusRequestEntityTooLarge) ||
		!strings.Contains(se.ErrStatus.Message, "copy") {
		t.Errorf("the copy bomb: %v, want 422 or 413 naming the copy limit", err)
	}
	if allocated > 100<<20 {
		t.Errorf("the copy bomb made the hub allocate %d MB", allocated>>20)
	}
	if took > 5*time.Second {
		t.Errorf("the copy bomb took %v", took)
	}

	// A normal JSON patch, with a copy, works.
	l, err := leases.Patch(c, "dev-1", types.JSONPatchType, []byte(`[
		{"op":"add","path":"/metadata/labels","value":{"site":"shop-7"}},
		{"op":"copy","from":"/metadata/labels/site","path":"/metadata/labels/copied"},
		{"op":"add","path":"/spec/leaseDurationSeconds","value":40}]`), metav1.PatchOptions{})
	if err != nil || l.Labels["copied"] != "shop-7" || *l.Spec.LeaseDurationSeconds != 40 {
		t.Errorf("a normal JSON patch: %v %v", err, l)
	}
}

// A JSON patch may have at most 10000 operations (kube-apiserver's limit:
// 413); merge and strategic merge patches are bounded by the 3 MiB body
// limit, and a result over the object limit is refused.
func TestPatchSizeLimits(t *testing.T) {
	h := hubtest.Start(t)
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cms := h.Client.CoreV1().ConfigMaps("default")
	if _, err := cms.Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Data: map[string]string{"a": "1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ops := make([]string, 10001)
	for i := range ops {
		ops[i] = `{"op":"test","path":"/data/a","value":"1"}`
	}
	_, err := cms.Patch(c, "p", types.JSONPatchType, []byte("["+strings.Join(ops, ",")+"]"), metav1.PatchOptions{})
	if !apierrors.IsRequestEntityTooLargeError(err) || !strings.Contains(err.Error(), "10000") {
		t.Errorf("10001 operations: %v, want 413", err)
	}
	_, err = cms.Patch(c, "p", types.JSONPatchType, []byte("["+strings.Join(ops[:10000], ",")+"]"), metav1.PatchOptions{})
	if err != nil {
		t.Errorf("10000 operations: %v", err)
	}
	huge := []byte(fmt.Sprintf(`{"data":{"b":%q}}`, strings.Repeat("x", 4<<20)))
	for _, pt := range []types.PatchType{types.MergePatchType, types.StrategicMergePatchType} {
		if _, err := cms.Patch(c, "p", pt, huge, metav1.PatchOptions{}); !apierrors.IsRequestEntityTooLargeError(err) {
			t.Errorf("a 4 MiB %s: %v, want 413", pt, err)
		}
	}
	// Two 700 KiB values: each patch is under the body limit, the result
	// over the object limit.
	half := strings.Repeat("y", 700<<10)
	if _, err := cms.Patch(c, "p", types.MergePatchType, []byte(fmt.Sprintf(`{"data":{"b":%q}}`, half)), metav1.PatchOptions{}); err != nil {
		t.Fatalf("a 700 KiB value: %v", err)
	}
	for _, pt := range []types.PatchType{types.MergePatchType, types.StrategicMergePatchType} {
		_, err := cms.Patch(c, "p", pt, []byte(fmt.Sprintf(`{"data":{"c":%q}}`, half)), metav1.PatchOptions{})
		if !apierrors.IsRequestEntityTooLargeError(err) && !apierrors.IsInvalid(err) {
			t.Errorf("a %s making a 1.4 MiB object: %v, want 413 or 422", pt, err)
		}
	}
	_, err = cms.Patch(c, "p", types.JSONPatchType, []byte(`[{"op":"copy","from":"/data/b","path":"/data/c"}]`), metav1.PatchOptions{})
	if !apierrors.IsRequestEntityTooLargeError(err) && !apierrors.IsInvalid(err) {
		t.Errorf("a JSON patch copy making a 1.4 MiB object: %v, want 413 or 422", err)
	}

	// A malformed patch a patch library panics on is a 400 (found by
	// FuzzPatch).
	_, err = cms.Patch(c, "p", types.JSONPatchType, []byte(`[{"op":"test","path":""}]`), metav1.PatchOptions{})
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("a test of the whole object without a value: %v, want 400", err)
	}

	// The scale subresource takes JSON patches too.
	if _, err := h.Client.AppsV1().Deployments("default").Create(c, deployment("web", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bomb := `[{"op":"add","path":"/spec/pad","value":"` + strings.Repeat("z", 2000) + `"}`
	for i := range 20 {
		bomb += fmt.Sprintf(`,{"op":"copy","from":"/spec","path":"/spec/x%d"}`, i)
	}
	start := time.Now()
	err = h.Client.AppsV1().RESTClient().Patch(types.JSONPatchType).Namespace("default").Resource("deployments").Name("web").SubResource("scale").
		Body([]byte(bomb + "]")).Do(c).Error()
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "copy") || time.Since(start) > 5*time.Second {
		t.Errorf("a copy bomb on the scale subresource: %v after %v, want 422", err, time.Since(start))
	}
}
