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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
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
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ri.Verb == "patch" && isApply(ct) {
		return s.applyScale(w, r, ri, types.PatchType(ct))
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

// applyScale serves a server-side apply of <workload>/scale, as
// kube-apiserver's (an autoscaler's, say): the applied configuration is
// an autoscaling/v1 Scale, of which only spec.replicas is kept (as there).
// It is applied as the workload's spec.replicas by the field manager of
// scale writes, so that the manager owns spec.replicas through scale
// (its entry says subresource: scale) and conflicts with any other
// manager of spec.replicas — an apply of the workload, kubectl scale —
// unless force=true.
func (s *Server) applyScale(w http.ResponseWriter, r *http.Request, ri *requestInfo, pt types.PatchType) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	opts, err := parsePatchOptions(r, pt)
	if err != nil {
		return err
	}
	dry, err := isDryRun(r)
	if err != nil {
		return err
	}
	if body, err = applyBodyToJSON(pt, body); err != nil {
		return err
	}
	patch, err := decodeScaleApply(ri, body)
	if err != nil {
		return err
	}
	fm, err := s.fields.get(ri.Resource, "scale")
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	out, _, _, err := s.update(r.Context(), ri.Resource, ri.Namespace, ri.Name, "", dry, owner{}, func(cur runtime.Object) (runtime.Object, error) {
		rv := patch.GetResourceVersion()
		if cm, _ := meta.Accessor(cur); rv != "" && rv != cm.GetResourceVersion() {
			return nil, conflict(ri, fmt.Sprintf("the object has been modified; please apply your changes to the latest version and try again (resourceVersion %s, current %s)", rv, cm.GetResourceVersion()))
		}
		obj, err := fm.Apply(cur, patch.DeepCopy(), opts.manager, opts.force)
		if err != nil {
			var se *apierrors.StatusError
			if errors.As(err, &se) {
				return nil, err
			}
			return nil, badRequest("applying to the scale of %s %q: %v", ri.Resource.Kind, ri.Name, err)
		}
		return obj, nil
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

// decodeScaleApply reads an applied autoscaling/v1 Scale naming the URL's
// workload and returns it as the applied configuration of the workload:
// its name and, when the Scale sets it, spec.replicas (a Scale without
// it gives up the manager's ownership of the replicas, as an apply that
// leaves out a field does).
func decodeScaleApply(ri *requestInfo, body []byte) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	if err := yaml.Unmarshal(body, &u.Object); err != nil {
		return nil, badRequest("error decoding YAML: %v; send the applied configuration of one autoscaling/v1 Scale as YAML or JSON", err)
	}
	if gvk := u.GroupVersionKind(); gvk != autoscalingv1.SchemeGroupVersion.WithKind("Scale") {
		return nil, badRequest("the applied configuration is apiVersion %q kind %q, but this is the scale subresource of %s %s; set apiVersion: autoscaling/v1 and kind: Scale", u.GetAPIVersion(), u.GetKind(), ri.Resource.GVR.GroupVersion(), ri.Resource.Kind)
	}
	var sc autoscalingv1.Scale
	j, err := json.Marshal(u.Object)
	if err != nil {
		return nil, badRequest("the applied configuration is not a valid Scale: %v", err)
	}
	strict, err := kjson.UnmarshalStrict(j, &sc, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, badRequest("the applied configuration is not a valid Scale: %v", err)
	}
	if len(strict) > 0 {
		return nil, badRequest("the applied Scale has fields a Scale does not have (%v); apply spec.replicas", errors.Join(strict...))
	}
	if len(sc.ManagedFields) > 0 {
		return nil, badRequest("metadata.managedFields must be nil in an applied configuration")
	}
	if sc.Name != "" && sc.Name != ri.Name {
		return nil, badRequest("the name of the object (%s) does not match the name on the URL (%s)", sc.Name, ri.Name)
	}
	if sc.Namespace != "" && sc.Namespace != ri.Namespace {
		return nil, badRequest("the namespace of the object (%s) does not match the namespace on the request (%s)", sc.Namespace, ri.Namespace)
	}
	replicas, hasReplicas, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "replicas")
	if hasReplicas && sc.Spec.Replicas < 0 {
		return nil, apierrors.NewInvalid(autoscalingv1.SchemeGroupVersion.WithKind("Scale").GroupKind(), ri.Name,
			field.ErrorList{field.Invalid(field.NewPath("spec", "replicas"), sc.Spec.Replicas, "must be greater than or equal to 0")})
	}
	parent := &unstructured.Unstructured{Object: map[string]any{}}
	parent.SetGroupVersionKind(ri.Resource.GVK())
	parent.SetName(ri.Name)
	if ri.Resource.Namespaced {
		parent.SetNamespace(ri.Namespace)
	}
	parent.SetResourceVersion(sc.ResourceVersion)
	if hasReplicas && replicas != nil {
		if err := unstructured.SetNestedField(parent.Object, int64(sc.Spec.Replicas), "spec", "replicas"); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
	}
	return parent, nil
}
