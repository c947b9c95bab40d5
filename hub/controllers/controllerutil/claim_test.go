package controllerutil

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api"
)

var rsGVK = appsv1.SchemeGroupVersion.WithKind("ReplicaSet")

func claimPod(name string, lbls map[string]string, owner *metav1.OwnerReference) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Labels: lbls}}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return p
}

// patchRecorder answers a Claimer's patches and remembers them by name.
type patchRecorder struct {
	patches map[string]map[string]any
	fail    map[string]error
}

func (r *patchRecorder) patch(_ context.Context, name string, data []byte) (*corev1.Pod, error) {
	if err := r.fail[name]; err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	r.patches[name] = m
	return claimPod(name+"-patched", nil, nil), nil
}

func TestClaimAdoptsReleasesAndSkips(t *testing.T) {
	owner := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "rs-uid"}}
	ours := metav1.NewControllerRef(owner, rsGVK)
	theirs := &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "other", UID: "other-uid", Controller: ptr.To(true)}
	match := map[string]string{"app": "web"}
	mirror := claimPod("mirror", match, nil)
	mirror.Annotations = map[string]string{api.AnnotationMirrorPod: "x"}
	deleting := claimPod("deleting", match, nil)
	deleting.DeletionTimestamp = &metav1.Time{}

	rec := &patchRecorder{patches: map[string]map[string]any{}}
	c := &Claimer[*corev1.Pod]{
		Owner: owner, OwnerGVK: rsGVK,
		Selector: labels.SelectorFromSet(match),
		Patch:    rec.patch,
	}
	claimed, err := c.Claim(context.Background(), []*corev1.Pod{
		claimPod("owned", match, ours),               // kept
		claimPod("orphan", match, nil),               // adopted
		claimPod("stray", map[string]string{}, ours), // released
		claimPod("foreign", match, theirs),           // someone else's
		claimPod("unrelated", map[string]string{"app": "db"}, nil),
		mirror,
		deleting,
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range claimed {
		names = append(names, p.Name)
	}
	if len(names) != 2 || names[0] != "owned" || names[1] != "orphan-patched" {
		t.Fatalf("claimed %v, want [owned orphan-patched] (the adopted pod as the patch returned it)", names)
	}
	if len(rec.patches) != 2 || rec.patches["orphan"] == nil || rec.patches["stray"] == nil {
		t.Fatalf("patched %v, want orphan (adopt) and stray (release)", rec.patches)
	}
	adopt := rec.patches["orphan"]["metadata"].(map[string]any)
	if adopt["uid"] != "uid-orphan" {
		t.Errorf("adoption patch has uid %v, want the orphan's (a precondition)", adopt["uid"])
	}
	if refs := adopt["ownerReferences"].([]any); len(refs) != 1 || refs[0].(map[string]any)["uid"] != "rs-uid" || refs[0].(map[string]any)["controller"] != true {
		t.Errorf("adoption patch adds %v, want a controller ref to rs-uid", refs)
	}
	release := rec.patches["stray"]["metadata"].(map[string]any)
	if refs := release["ownerReferences"].([]any); len(refs) != 1 || refs[0].(map[string]any)["$patch"] != "delete" || refs[0].(map[string]any)["uid"] != "rs-uid" {
		t.Errorf("release patch %v, want a delete of the ref to rs-uid", refs)
	}
}

func TestClaimChecksTheOwnerOnceBeforeAdopting(t *testing.T) {
	owner := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "rs-uid"}}
	match := map[string]string{"app": "web"}
	rec := &patchRecorder{patches: map[string]map[string]any{}}
	checks := 0
	c := &Claimer[*corev1.Pod]{
		Owner: owner, OwnerGVK: rsGVK, Selector: labels.SelectorFromSet(match), Patch: rec.patch,
		CanAdopt: func(context.Context) error { checks++; return errors.New("being deleted") },
	}
	claimed, err := c.Claim(context.Background(), []*corev1.Pod{claimPod("a", match, nil), claimPod("b", match, nil)})
	if err == nil || len(claimed) != 0 || len(rec.patches) != 0 {
		t.Fatalf("claimed %d, patched %d, err %v; want nothing adopted and an error", len(claimed), len(rec.patches), err)
	}
	if checks != 1 {
		t.Errorf("CanAdopt called %d times, want once per Claimer", checks)
	}
}

func TestClaimToleratesAPodGoneBeforeRelease(t *testing.T) {
	owner := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "rs-uid"}}
	gone := apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "stray")
	rec := &patchRecorder{patches: map[string]map[string]any{}, fail: map[string]error{"stray": gone}}
	c := &Claimer[*corev1.Pod]{Owner: owner, OwnerGVK: rsGVK, Selector: labels.SelectorFromSet(map[string]string{"app": "web"}), Patch: rec.patch}
	claimed, err := c.Claim(context.Background(), []*corev1.Pod{claimPod("stray", nil, metav1.NewControllerRef(owner, rsGVK))})
	if err != nil || len(claimed) != 0 {
		t.Fatalf("claimed %d, err %v; want nothing and no error for a pod already gone", len(claimed), err)
	}
}
