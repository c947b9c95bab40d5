package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	cbor "k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// isApply says whether a patch's media type is a server-side apply.
func isApply(ct string) bool {
	return ct == string(types.ApplyYAMLPatchType) || ct == string(types.ApplyCBORPatchType)
}

// applyBodyToJSON reads an applied configuration sent as YAML (or JSON)
// or CBOR into JSON. A CBOR body is transcoded as kube-apiserver does
// (with CBORServingAndStorage on): any well-formed data item, then the
// same checks as YAML.
func applyBodyToJSON(pt types.PatchType, body []byte) ([]byte, error) {
	if pt == types.ApplyCBORPatchType {
		var v any
		if err := cbor.Unmarshal(body, &v); err != nil {
			return nil, badRequest("error decoding CBOR: %v; send the applied configuration as one CBOR map (or as YAML with application/apply-patch+yaml)", err)
		}
		j, err := json.Marshal(v)
		if err != nil {
			return nil, badRequest("the CBOR applied configuration has no JSON form: %v; send maps with string keys, strings, numbers, booleans and arrays", err)
		}
		return j, nil
	}
	return body, nil
}

// handleApply serves a server-side apply (PATCH with
// application/apply-patch+yaml or +cbor): the body is the applier's whole
// intent for the fields it manages. structured-merge-diff merges it into the live
// object by the schemas of the served OpenAPI documents, takes ownership of
// the applied fields for the fieldManager, drops the fields it applied
// before and applies no more (unless another manager owns them too), and
// refuses with 409 a change to a field another manager owns unless
// force=true. The result is then written as any update is (defaults,
// validation, admission, preconditions); an absent object is created.
func (s *Server) handleApply(w http.ResponseWriter, r *http.Request, ri *requestInfo, pt types.PatchType) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	opts, err := parsePatchOptions(r, pt)
	if err != nil {
		return err
	}
	if body, err = applyBodyToJSON(pt, body); err != nil {
		return err
	}
	dry, err := isDryRun(r)
	if err != nil {
		return err
	}
	patch, err := decodeApply(ri, body)
	if err != nil {
		return err
	}
	sub := ri.Subresource
	fm, err := s.fields.get(ri.Resource, sub)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	apply := func(live runtime.Object) (runtime.Object, error) {
		obj, err := fm.Apply(live, patch.DeepCopy(), opts.manager, opts.force)
		if err != nil {
			var se *apierrors.StatusError
			if errors.As(err, &se) {
				return nil, err
			}
			return nil, badRequest("applying to %s %q: %v; apply only fields of %s, with the types the OpenAPI document at /openapi/v3 gives", ri.Resource.Kind, ri.Name, err, ri.Resource.Kind)
		}
		return obj, nil
	}
	for attempt := 0; ; attempt++ {
		out, raw, created, err := s.update(r.Context(), ri.Resource, ri.Namespace, ri.Name, sub, dry, owner{}, func(cur runtime.Object) (runtime.Object, error) {
			if cur == nil {
				// An Event, which update creates itself.
				return apply(emptyLive(ri))
			}
			obj, err := apply(cur)
			if err != nil {
				return nil, err
			}
			// A resourceVersion in the applied configuration is a
			// precondition: the merge kept it in place of the live one.
			cm, _ := meta.Accessor(cur)
			om, err := meta.Accessor(obj)
			if err != nil {
				return nil, apierrors.NewInternalError(err)
			}
			if om.GetResourceVersion() != cm.GetResourceVersion() {
				return nil, conflict(ri, fmt.Sprintf("the object has been modified; please apply your changes to the latest version and try again (the applied configuration names resourceVersion %s, the current one is %s)", om.GetResourceVersion(), cm.GetResourceVersion()))
			}
			return obj, nil
		})
		if apierrors.IsNotFound(err) && sub == "" && attempt < 3 {
			// Apply creates what is not there yet.
			out, raw, err = s.applyCreate(r, ri, patch, dry, apply)
			if apierrors.IsAlreadyExists(err) {
				continue // created meanwhile: apply to it
			}
			if err != nil {
				return err
			}
			return s.writeObject(w, r, ri.Resource, http.StatusCreated, out, raw)
		}
		if err != nil {
			return err
		}
		code := http.StatusOK
		if created {
			code = http.StatusCreated
		}
		return s.writeObject(w, r, ri.Resource, code, out, raw)
	}
}

// emptyLive is what an apply that creates merges into: the URL's object
// with nothing set.
func emptyLive(ri *requestInfo) runtime.Object {
	live := ri.Resource.New()
	live.GetObjectKind().SetGroupVersionKind(ri.Resource.GVK())
	lm, _ := meta.Accessor(live)
	lm.SetName(ri.Name)
	lm.SetNamespace(ri.Namespace)
	return live
}

// applyCreate creates the object an apply names from an empty one.
func (s *Server) applyCreate(r *http.Request, ri *requestInfo, patch *unstructured.Unstructured, dry bool, apply func(runtime.Object) (runtime.Object, error)) (runtime.Object, []byte, error) {
	if rv := patch.GetResourceVersion(); rv != "" {
		return nil, nil, apierrors.NewNotFound(ri.Resource.GVR.GroupResource(), ri.Name)
	}
	obj, err := apply(emptyLive(ri))
	if err != nil {
		return nil, nil, err
	}
	// The merge yields what the applied configuration says, typed by the
	// scheme; name and namespace are the URL's.
	m, _ := meta.Accessor(obj)
	m.SetName(ri.Name)
	if ri.Resource.Namespaced {
		m.SetNamespace(ri.Namespace)
	} else {
		m.SetNamespace("")
	}
	return s.create(r.Context(), ri.Resource, obj, dry, owner{})
}

// decodeApply reads an applied configuration: YAML (or JSON) of the
// endpoint's own kind and apiVersion, naming the URL's object.
func decodeApply(ri *requestInfo, body []byte) (*unstructured.Unstructured, error) {
	res := ri.Resource
	u := &unstructured.Unstructured{Object: map[string]any{}}
	if err := yaml.Unmarshal(body, &u.Object); err != nil {
		return nil, badRequest("error decoding YAML: %v; send the applied configuration of one %s as YAML or JSON", err, res.Kind)
	}
	if u.Object == nil || len(u.Object) == 0 {
		return nil, badRequest("the applied configuration is empty; send a %s with apiVersion, kind and metadata.name", res.Kind)
	}
	gvk := u.GroupVersionKind()
	if gvk.Kind != res.Kind || gvk.GroupVersion() != res.GVR.GroupVersion() {
		return nil, badRequest("the applied configuration is apiVersion %q kind %q, but this is the endpoint of %s %s; set apiVersion and kind to those", u.GetAPIVersion(), u.GetKind(), res.GVR.GroupVersion(), res.Kind)
	}
	if n := u.GetName(); n != ri.Name {
		return nil, badRequest("the name of the object (%s) does not match the name on the URL (%s)", n, ri.Name)
	}
	if ns := u.GetNamespace(); ns != "" && res.Namespaced && ns != ri.Namespace {
		return nil, badRequest("the namespace of the object (%s) does not match the namespace on the request (%s)", ns, ri.Namespace)
	}
	return u, nil
}
