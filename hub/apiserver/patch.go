package apiserver

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"

	jsonpatch "github.com/evanphx/json-patch/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

func statusUnsupportedMedia(ct string) metav1.Status {
	return metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
		Message: fmt.Sprintf("the body of the request was in an unknown format (%s); send application/json or application/yaml", ct),
	}
}

// handlePatch applies a JSON merge patch, a JSON patch or a strategic
// merge patch (what kubectl apply sends) to the current object and stores
// the result through the ordinary update path.
func (s *Server) handlePatch(w http.ResponseWriter, r *http.Request, ri *requestInfo) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	fv, err := parseFieldValidation(r)
	if err != nil {
		return err
	}
	dry, err := isDryRun(r)
	if err != nil {
		return err
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var apply func(cur []byte, obj runtime.Object) ([]byte, error)
	switch ct {
	case "application/merge-patch+json":
		apply = func(cur []byte, _ runtime.Object) ([]byte, error) { return jsonpatch.MergePatch(cur, body) }
	case "application/json-patch+json":
		p, err := jsonpatch.DecodePatch(body)
		if err != nil {
			return badRequest("the JSON patch is not valid: %v", err)
		}
		apply = func(cur []byte, _ runtime.Object) ([]byte, error) { return p.Apply(cur) }
	case "application/strategic-merge-patch+json":
		if ri.Resource.GVR.Group == "flotilla.dev" {
			return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
				Message: fmt.Sprintf("strategic merge patch is not supported for %s; use a JSON merge patch (application/merge-patch+json)", ri.Resource.GVR.Resource)}}
		}
		var patchMap map[string]any
		if err := json.Unmarshal(body, &patchMap); err != nil {
			return badRequest("the strategic merge patch is not valid JSON: %v", err)
		}
		apply = func(cur []byte, obj runtime.Object) ([]byte, error) {
			return strategicpatch.StrategicMergePatch(cur, body, obj)
		}
	case "application/apply-patch+yaml", "application/apply-patch+cbor":
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
			Message: "server-side apply is not supported by this hub; use client-side apply (kubectl apply without --server-side)"}}
	default:
		return &apierrors.StatusError{ErrStatus: statusUnsupportedMedia(ct)}
	}
	var warnings []string
	out, raw, _, err := s.update(r.Context(), ri.Resource, ri.Namespace, ri.Name, ri.Subresource, dry, func(cur runtime.Object) (runtime.Object, error) {
		curJSON, err := encodeObject(ri.Resource, cur)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		patched, err := apply(curJSON, ri.Resource.New())
		if err != nil {
			return nil, badRequest("applying the patch to %s %q: %v", ri.Resource.Kind, ri.Name, err)
		}
		obj, w, err := decodeBody(ri.Resource, patched, fv)
		if err != nil {
			return nil, err
		}
		warnings = w
		// A patch that names a resourceVersion is a precondition.
		cm, _ := meta.Accessor(cur)
		om, _ := meta.Accessor(obj)
		if om.GetResourceVersion() != cm.GetResourceVersion() {
			return nil, conflict(ri, fmt.Sprintf("the object has been modified; please apply your changes to the latest version and try again (the patch names resourceVersion %s, the current one is %s)", om.GetResourceVersion(), cm.GetResourceVersion()))
		}
		if om.GetName() != cm.GetName() || om.GetNamespace() != cm.GetNamespace() {
			return nil, badRequest("a patch may not change the name or namespace of an object")
		}
		return obj, nil
	})
	if err != nil {
		return err
	}
	addWarnings(w, warnings)
	return s.writeObject(w, r, ri.Resource, http.StatusOK, out, raw)
}
