package apiserver

import (
	"context"
	"net/http"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	"flotilla.dev/flotilla/api"
)

var nsGVR = corev1.SchemeGroupVersion.WithResource("namespaces")

// namespaceOf reads a namespace for the pod policy: the cache, else the
// store (a namespace created a moment ago).
func (s *Server) namespaceOf(ctx context.Context, name string) (*corev1.Namespace, error) {
	o, err := serverLookup{s}.Get(ctx, nsGVR, "", name)
	if err != nil {
		return nil, err
	}
	return o.(*corev1.Namespace), nil
}

// admitPodSecurity enforces the pod policy (validation.PodSecurity) on a
// pod being created (old nil) or updated: every client's pods, the
// controllers' included, as Kubernetes' PodSecurity admission. The
// refusal is a 403 in Kubernetes' words: pods "x" is forbidden: violates
// PodSecurity "baseline:latest": ...
func (s *Server) admitPodSecurity(ctx context.Context, obj, old runtime.Object) error {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	var oldPod *corev1.Pod
	if old != nil {
		oldPod = old.(*corev1.Pod)
	}
	ns, err := s.namespaceOf(ctx, pod.Namespace)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return err
		}
		return apierrors.NewInternalError(err)
	}
	if err := s.cfg.PodSecurity.CheckPod(ns, pod, oldPod); err != nil {
		return apierrors.NewForbidden(corev1.Resource("pods"), pod.Name, err)
	}
	return nil
}

// podSecurityWarnings adds, to the answer of a write of a Deployment,
// ReplicaSet or DaemonSet, a warning for each way its pods would be
// refused in its namespace (as Kubernetes warns on pod templates); to a
// Namespace's, the pods in it its level would refuse.
func (s *Server) podSecurityWarnings(w http.ResponseWriter, r *http.Request, obj runtime.Object) {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return
	}
	if strings.HasSuffix(r.URL.Path, "/status") || strings.HasSuffix(r.URL.Path, "/scale") {
		return // the template did not change
	}
	var namespace string
	switch o := obj.(type) {
	case *corev1.Namespace:
		if r.Method != http.MethodPost {
			addWarnings(w, s.existingPodWarnings(o))
		}
		return
	case *appsv1.Deployment:
		namespace = o.Namespace
	case *appsv1.ReplicaSet:
		namespace = o.Namespace
	case *appsv1.DaemonSet:
		namespace = o.Namespace
	default:
		return
	}
	ns, err := s.namespaceOf(r.Context(), namespace)
	if err != nil {
		return
	}
	addWarnings(w, s.cfg.PodSecurity.TemplateWarnings(ns, obj))
}

// existingPodWarnings: a namespace given a level some of its pods do not
// meet is changed, with a warning naming them (kubectl label
// --dry-run=server shows them before anything changes).
func (s *Server) existingPodWarnings(ns *corev1.Namespace) []string {
	res, ok := api.ResourceFor(corev1.SchemeGroupVersion.WithResource("pods"))
	if !ok {
		return nil
	}
	objs, _ := s.cache.list(res, &filter{namespace: ns.Name})
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, co := range objs {
		if p, ok := co.obj.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	return s.cfg.PodSecurity.ExistingPodWarnings(ns, pods)
}
