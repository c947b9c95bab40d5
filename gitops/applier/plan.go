package applier

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/gitops/loader"
)

// Annotations the applier keeps on the objects it writes, beside
// api.LabelSource and api.AnnotationSourceCommit.
const (
	// AnnotationLastApplied holds the manifest the object was last applied
	// from (Secret values replaced by their SHA-256), for three-way merges.
	AnnotationLastApplied = api.AnnotationLastApplied
	// ReconcileDisabled is the value of api.AnnotationReconcile that opts
	// an object out of updates and pruning once it exists.
	ReconcileDisabled = "disabled"
)

// key identifies an object across versions of its manifest.
type key struct {
	Group, Kind, Namespace, Name string
}

func (k key) String() string {
	if k.Namespace != "" {
		return k.Kind + " " + k.Namespace + "/" + k.Name
	}
	return k.Kind + " " + k.Name
}

// item is one object of the revision, ready to apply.
type item struct {
	key  key
	res  *api.Resource
	obj  *unstructured.Unstructured
	file string
	line int
	// lastApplied is what goes into AnnotationLastApplied.
	lastApplied string
}

func (it *item) fail(format string, args ...any) *loader.Error {
	return &loader.Error{File: it.file, Line: it.line, Object: it.key.String(), Msg: fmt.Sprintf(format, args...)}
}

// stage orders kinds so that what others refer to exists first.
func stage(kind string) int {
	switch kind {
	case "Namespace":
		return 0
	case "ConfigMap", "Secret":
		return 1
	case "Service":
		return 2
	case "Deployment", "DaemonSet", "ReplicaSet", "Pod":
		return 3
	}
	return 4
}

// plan checks each object and puts it into the shape it is applied in.
func plan(objs []loader.Object, source string) ([]*item, loader.Errors) {
	var errs loader.Errors
	seen := map[key]*item{}
	var items []*item
	for _, o := range objs {
		u := o.Obj.DeepCopy()
		gvk := u.GroupVersionKind()
		res, ok := api.ResourceForKind(gvk)
		if !ok {
			errs = append(errs, &loader.Error{File: o.File, Line: o.Line, Object: o.ID(),
				Msg: fmt.Sprintf("unknown kind %s %s: the hub serves %s", gvk.GroupVersion(), gvk.Kind, servedKinds())})
			continue
		}
		if res.Namespaced {
			if u.GetNamespace() == "" {
				u.SetNamespace(api.NamespaceDefault)
			}
		} else {
			u.SetNamespace("")
		}
		it := &item{key: key{Group: gvk.Group, Kind: gvk.Kind, Namespace: u.GetNamespace(), Name: u.GetName()}, res: res, obj: u, file: o.File, line: o.Line}
		if prev, dup := seen[it.key]; dup {
			errs = append(errs, it.fail("duplicate object: also defined at %s", where(prev)))
			continue
		}
		if ls := u.GetLabels()[api.LabelSource]; ls != "" && ls != source {
			errs = append(errs, it.fail("the manifest sets label %s=%s; the hub sets it to the source's name (%s)", api.LabelSource, ls, source))
			continue
		}
		if err := normalize(u); err != nil {
			errs = append(errs, it.fail("%v", err))
			continue
		}
		labels := u.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[api.LabelSource] = source
		u.SetLabels(labels)
		la, err := lastApplied(u)
		if err != nil {
			errs = append(errs, it.fail("%v", err))
			continue
		}
		it.lastApplied = la
		seen[it.key] = it
		items = append(items, it)
	}
	sort.SliceStable(items, func(i, j int) bool { return stage(items[i].key.Kind) < stage(items[j].key.Kind) })
	return items, errs
}

func where(it *item) string {
	if it.line > 0 {
		return fmt.Sprintf("%s:%d", it.file, it.line)
	}
	return it.file
}

func servedKinds() string {
	var ks []string
	for _, r := range api.Resources() {
		ks = append(ks, r.GVR.GroupVersion().String()+" "+r.Kind)
	}
	sort.Strings(ks)
	return fmt.Sprint(ks)
}

// normalize drops what the server owns and puts manifests into the form
// the server stores, so that an unchanged manifest merges to no change.
func normalize(u *unstructured.Unstructured) error {
	delete(u.Object, "status")
	md, _ := u.Object["metadata"].(map[string]any)
	for _, f := range []string{"resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"} {
		delete(md, f)
	}
	ann := u.GetAnnotations()
	delete(ann, AnnotationLastApplied)
	delete(ann, api.AnnotationSourceCommit)
	if len(ann) == 0 {
		ann = nil
	}
	u.SetAnnotations(ann)
	if u.GetKind() == "Secret" && u.GroupVersionKind().Group == "" {
		// The server folds stringData into data; do it here so the merge
		// compares like with like.
		sd, found, err := unstructured.NestedMap(u.Object, "stringData")
		if err != nil {
			return fmt.Errorf("stringData: %w", err)
		}
		if found {
			data, _, err := unstructured.NestedMap(u.Object, "data")
			if err != nil {
				return fmt.Errorf("data: %w", err)
			}
			if data == nil {
				data = map[string]any{}
			}
			for k, v := range sd {
				s, ok := v.(string)
				if !ok {
					return fmt.Errorf("stringData[%q] must be a string", k)
				}
				data[k] = base64.StdEncoding.EncodeToString([]byte(s))
			}
			delete(u.Object, "stringData")
			u.Object["data"] = data
		}
	}
	return nil
}

// lastApplied encodes the manifest for AnnotationLastApplied. A Secret's
// values are replaced by their digest: the annotation is readable by
// anyone who can read the object's metadata, and the merge needs only the
// keys.
func lastApplied(u *unstructured.Unstructured) (string, error) {
	c := u.DeepCopy()
	if c.GetKind() == "Secret" && c.GroupVersionKind().Group == "" {
		if data, ok := c.Object["data"].(map[string]any); ok {
			hashed := make(map[string]any, len(data))
			for k, v := range data {
				s, _ := v.(string)
				sum := sha256.Sum256([]byte(s))
				hashed[k] = "sha256:" + hex.EncodeToString(sum[:])
			}
			c.Object["data"] = hashed
		}
	}
	b, err := json.Marshal(c.Object)
	if err != nil {
		return "", fmt.Errorf("encoding the manifest: %w", err)
	}
	return string(b), nil
}

// inventoryKey reads an inventory entry back into a key.
func inventoryKey(e v1alpha1.InventoryEntry) (key, *api.Resource, bool) {
	gv, err := schema.ParseGroupVersion(e.APIVersion)
	if err != nil {
		return key{}, nil, false
	}
	res, ok := api.ResourceForKind(gv.WithKind(e.Kind))
	if !ok {
		return key{}, nil, false
	}
	return key{Group: gv.Group, Kind: e.Kind, Namespace: e.Namespace, Name: e.Name}, res, true
}

func inventoryEntry(it *item) v1alpha1.InventoryEntry {
	return v1alpha1.InventoryEntry{APIVersion: it.res.GVR.GroupVersion().String(), Kind: it.key.Kind, Namespace: it.key.Namespace, Name: it.key.Name}
}
