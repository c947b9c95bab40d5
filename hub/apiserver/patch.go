package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"

	jsonpatch "github.com/evanphx/json-patch/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"flotilla.dev/flotilla/api"
)

// Patch limits: kube-apiserver's.
const (
	// maxJSONPatchOperations bounds the operations of a JSON patch (413
	// past it).
	maxJSONPatchOperations = 10000
	// maxPatchCopyBytes bounds what the copy operations of a JSON patch
	// may copy in all, so that a few copies of a value into itself cannot
	// grow it exponentially (kube-apiserver: --json-patch-max-copy-bytes,
	// the largest request body).
	maxPatchCopyBytes = maxBodyBytes
	// maxPatchResultBytes bounds the result of any patch before it is
	// decoded: no more than a body may be. Merge and strategic merge
	// patches are bounded by their body (their result is at most the
	// object and the patch), JSON patches by maxPatchCopyBytes too; the
	// object stored is then held to api.MaxObjectSize as any other.
	maxPatchResultBytes = maxBodyBytes
)

// decodeJSONPatch decodes an RFC 6902 patch of at most
// maxJSONPatchOperations operations.
func decodeJSONPatch(body []byte) (jsonpatch.Patch, error) {
	p, err := jsonpatch.DecodePatch(body)
	if err != nil {
		return nil, badRequest("the JSON patch is not valid: %v", err)
	}
	if len(p) > maxJSONPatchOperations {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("The allowed maximum operations in a JSON patch is %d, got %d; send the change in several patches", maxJSONPatchOperations, len(p)))
	}
	return p, nil
}

// applyJSONPatch applies p to doc with its copies bounded by
// maxPatchCopyBytes: past it the answer is 422, as kube-apiserver's.
func applyJSONPatch(p jsonpatch.Patch, doc []byte) (out []byte, err error) {
	defer recoverPatch(&err)
	opts := jsonpatch.NewApplyOptions()
	opts.AccumulatedCopySizeLimit = maxPatchCopyBytes
	out, err = p.ApplyWithOptions(doc, opts)
	var ce *jsonpatch.AccumulatedCopySizeError
	if errors.As(err, &ce) {
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
			Message: fmt.Sprintf("the JSON patch's copy operations copy more than %d bytes in all (%v); copy less, or send the values themselves", maxPatchCopyBytes, err)}}
	}
	return out, err
}

// recoverPatch turns a panic of a patch library on a malformed patch
// (evanphx/json-patch panics on a "test" of the whole document without a
// value) into a 400 that says so.
func recoverPatch(err *error) {
	if p := recover(); p != nil {
		*err = badRequest("the patch is malformed and cannot be applied (%v); check that every operation has the fields it needs", p)
	}
}

func statusUnsupportedMedia(ct string) metav1.Status {
	return metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
		Message: fmt.Sprintf("the body of the request was in an unknown format (%s); send application/json or application/yaml", ct),
	}
}

// newPatcher checks a patch body of content type ct for an object of res
// and returns what applies it to the object's JSON: a JSON merge patch, a
// JSON patch (RFC 6902) or a strategic merge patch (what kubectl apply
// sends). A result larger than maxPatchResultBytes is refused (413)
// before anyone decodes it.
func newPatcher(res *api.Resource, ct string, body []byte) (func(cur []byte) ([]byte, error), error) {
	var apply func(cur []byte) ([]byte, error)
	switch ct {
	case "application/merge-patch+json":
		apply = func(cur []byte) ([]byte, error) { return jsonpatch.MergePatch(cur, body) }
	case "application/json-patch+json":
		p, err := decodeJSONPatch(body)
		if err != nil {
			return nil, err
		}
		apply = func(cur []byte) ([]byte, error) { return applyJSONPatch(p, cur) }
	case "application/strategic-merge-patch+json":
		if res.GVR.Group == "flotilla.dev" {
			return nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
				Message: fmt.Sprintf("strategic merge patch is not supported for %s; use a JSON merge patch (application/merge-patch+json)", res.GVR.Resource)}}
		}
		var patchMap map[string]any
		if err := json.Unmarshal(body, &patchMap); err != nil {
			return nil, badRequest("the strategic merge patch is not valid JSON: %v", err)
		}
		apply = func(cur []byte) ([]byte, error) {
			return strategicpatch.StrategicMergePatch(cur, body, res.New())
		}
	default:
		return nil, &apierrors.StatusError{ErrStatus: statusUnsupportedMedia(ct)}
	}
	return func(cur []byte) (out []byte, err error) {
		defer recoverPatch(&err)
		out, err = apply(cur)
		if err == nil && len(out) > maxPatchResultBytes {
			// Refused before it is decoded: it could not have been
			// sent as a body either.
			return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the patched %s would be %d bytes; objects are limited to %d bytes, so patch less into it", res.Kind, len(out), api.MaxObjectSize))
		}
		return out, err
	}, nil
}

// handlePatch applies a JSON merge patch, a JSON patch or a strategic
// merge patch (what kubectl apply sends) to the current object and stores
// the result through the ordinary update path; server-side applies go to
// handleApply.
func (s *Server) handlePatch(w http.ResponseWriter, r *http.Request, ri *requestInfo) error {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if isApply(ct) {
		return s.handleApply(w, r, ri, types.PatchType(ct))
	}
	if _, err := parsePatchOptions(r, types.PatchType(ct)); err != nil {
		return err
	}
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
	apply, err := newPatcher(ri.Resource, ct, body)
	if err != nil {
		return err
	}
	var warnings []string
	out, raw, _, err := s.update(r.Context(), ri.Resource, ri.Namespace, ri.Name, ri.Subresource, dry, ownerOf(r), func(cur runtime.Object) (runtime.Object, error) {
		curJSON, err := encodeObject(ri.Resource, cur)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		patched, err := apply(curJSON)
		if err != nil {
			var se *apierrors.StatusError
			if errors.As(err, &se) {
				return nil, err
			}
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
