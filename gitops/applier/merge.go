package applier

import (
	"encoding/json"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"flotilla.dev/flotilla/api"
)

var (
	metaMu    sync.Mutex
	metaCache = map[schema.GroupVersionKind]strategicpatch.LookupPatchMeta{}
)

// patchMeta gives the merge keys and strategies of a kind's Go type.
func patchMeta(gvk schema.GroupVersionKind) (strategicpatch.LookupPatchMeta, error) {
	metaMu.Lock()
	defer metaMu.Unlock()
	if m, ok := metaCache[gvk]; ok {
		return m, nil
	}
	obj, err := api.Scheme.New(gvk)
	if err != nil {
		return nil, fmt.Errorf("no Go type for %s: %w", gvk, err)
	}
	m, err := strategicpatch.NewPatchMetaFromStruct(obj)
	if err != nil {
		return nil, err
	}
	metaCache[gvk] = m
	return m, nil
}

// merge computes the object to write so that live carries the manifest of
// it: the fields the previous manifest set and this one dropped are
// removed, the fields this one sets are set, everything else stays. It
// returns nil when live already matches.
func merge(it *item, live *unstructured.Unstructured, commit string) (*unstructured.Unstructured, error) {
	desired := it.obj.DeepCopy()
	ann := desired.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AnnotationLastApplied] = it.lastApplied
	// The commit annotation says which commit last changed the object; a
	// new commit alone is no reason to write.
	if c, ok := live.GetAnnotations()[api.AnnotationSourceCommit]; ok {
		ann[api.AnnotationSourceCommit] = c
	} else {
		ann[api.AnnotationSourceCommit] = commit
	}
	desired.SetAnnotations(ann)

	var original []byte
	if la, ok := live.GetAnnotations()[AnnotationLastApplied]; ok {
		original = []byte(la)
	}
	modified, err := json.Marshal(desired.Object)
	if err != nil {
		return nil, err
	}
	current, err := json.Marshal(live.Object)
	if err != nil {
		return nil, err
	}
	meta, err := patchMeta(desired.GroupVersionKind())
	if err != nil {
		return nil, err
	}
	patch, err := strategicpatch.CreateThreeWayMergePatch(original, modified, current, meta, true)
	if err != nil {
		return nil, fmt.Errorf("computing the merge with the live object: %w", err)
	}
	if string(patch) == "{}" {
		return nil, nil
	}
	out, err := strategicpatch.StrategicMergePatchUsingLookupPatchMeta(current, patch, meta)
	if err != nil {
		return nil, fmt.Errorf("merging with the live object: %w", err)
	}
	merged := &unstructured.Unstructured{}
	if err := merged.UnmarshalJSON(out); err != nil {
		return nil, err
	}
	a := merged.GetAnnotations()
	a[api.AnnotationSourceCommit] = commit
	merged.SetAnnotations(a)
	return merged, nil
}

// forCreate is the object to create: the manifest with its marks.
func forCreate(it *item, commit string) *unstructured.Unstructured {
	u := it.obj.DeepCopy()
	ann := u.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AnnotationLastApplied] = it.lastApplied
	ann[api.AnnotationSourceCommit] = commit
	u.SetAnnotations(ann)
	return u
}
