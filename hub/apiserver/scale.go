package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"

	jsonpatch "github.com/evanphx/json-patch/v5"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
)

// hasScale says which resources serve the scale subresource (kubectl scale).
func hasScale(kind string) bool { return kind == "Deployment" || kind == "ReplicaSet" }

// scaleOf reads the Scale view of a workload.
func scaleOf(obj runtime.Object) (*autoscalingv1.Scale, error) {
	s := &autoscalingv1.Scale{TypeMeta: metav1.TypeMeta{APIVersion: "autoscaling/v1", Kind: "Scale"}}
	var sel *metav1.LabelSelector
	switch o := obj.(type) {
	case *appsv1.Deployment:
		s.ObjectMeta = scaleMeta(o.ObjectMeta)
		s.Spec.Replicas = deref(o.Spec.Replicas)
		s.Status.Replicas = o.Status.Replicas
		sel = o.Spec.Selector
	case *appsv1.ReplicaSet:
		s.ObjectMeta = scaleMeta(o.ObjectMeta)
		s.Spec.Replicas = deref(o.Spec.Replicas)
		s.Status.Replicas = o.Status.Replicas
		sel = o.Spec.Selector
	default:
		return nil, fmt.Errorf("%T has no scale subresource", obj)
	}
	if sel != nil {
		ls, err := metav1.LabelSelectorAsSelector(sel)
		if err == nil {
			s.Status.Selector = ls.String()
		}
	}
	return s, nil
}

func scaleMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion, CreationTimestamp: m.CreationTimestamp}
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

func setReplicas(obj runtime.Object, n int32) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		o.Spec.Replicas = &n
	case *appsv1.ReplicaSet:
		o.Spec.Replicas = &n
	}
}

// handleScale serves GET, PUT and PATCH of <workload>/scale.
func (s *Server) handleScale(w http.ResponseWriter, r *http.Request, ri *requestInfo) error {
	if ri.Verb == "get" {
		if err := s.cache.waitFresh(r.Context()); err != nil {
			return err
		}
		co := s.cache.get(ri.Resource, ri.Namespace, ri.Name)
		if co == nil {
			return apierrors.NewNotFound(ri.Resource.GVR.GroupResource(), ri.Name)
		}
		sc, err := scaleOf(co.obj)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		writeJSON(w, http.StatusOK, sc)
		return nil
	}
	if ri.Verb != "update" && ri.Verb != "patch" {
		return methodNotAllowed(ri.Resource, r.Method)
	}
	if err := checkFieldManager(r, "UpdateOptions"); err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	dry, err := isDryRun(r)
	if err != nil {
		return err
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	o := ownerOf(r)
	o.subresource = "scale"
	out, _, _, err := s.update(r.Context(), ri.Resource, ri.Namespace, ri.Name, "", dry, o, func(cur runtime.Object) (runtime.Object, error) {
		sc, err := scaleOf(cur)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		curJSON, _ := json.Marshal(sc)
		var next []byte
		switch {
		case ri.Verb == "update":
			next, err = bodyToJSON(r, body)
		case ct == "application/json-patch+json":
			var p jsonpatch.Patch
			if p, err = decodeJSONPatch(body); err != nil {
				return nil, err
			}
			if next, err = applyJSONPatch(p, curJSON); err != nil {
				var se *apierrors.StatusError
				if errors.As(err, &se) {
					return nil, err
				}
			}
		case ct == "application/merge-patch+json" || ct == "application/strategic-merge-patch+json":
			// A Scale has no lists: a strategic merge is a merge patch.
			next, err = jsonpatch.MergePatch(curJSON, body)
		default:
			return nil, &apierrors.StatusError{ErrStatus: statusUnsupportedMedia(ct)}
		}
		if err != nil {
			return nil, badRequest("applying the scale change: %v", err)
		}
		var want autoscalingv1.Scale
		if err := kjson.UnmarshalCaseSensitivePreserveInts(next, &want); err != nil {
			return nil, badRequest("the body is not a valid Scale: %v", err)
		}
		if want.ResourceVersion != "" && want.ResourceVersion != sc.ResourceVersion {
			return nil, conflict(ri, fmt.Sprintf("the object has been modified; please apply your changes to the latest version and try again (resourceVersion %s, current %s)", want.ResourceVersion, sc.ResourceVersion))
		}
		if want.Spec.Replicas < 0 {
			return nil, apierrors.NewInvalid(autoscalingv1.SchemeGroupVersion.WithKind("Scale").GroupKind(), ri.Name,
				field.ErrorList{field.Invalid(field.NewPath("spec", "replicas"), want.Spec.Replicas, "must be greater than or equal to 0")})
		}
		setReplicas(cur, want.Spec.Replicas)
		return cur, nil
	})
	if err != nil {
		return err
	}
	sc, err := scaleOf(out)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	writeJSON(w, http.StatusOK, sc)
	return nil
}
