package podutil

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api"
)

// Condition returns the first condition of type t in st, or nil.
func Condition(st *corev1.PodStatus, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

// ConditionTrue reports whether st has a condition of type t that is True.
func ConditionTrue(st *corev1.PodStatus, t corev1.PodConditionType) bool {
	c := Condition(st, t)
	return c != nil && c.Status == corev1.ConditionTrue
}

// IsReady reports whether the pod's Ready condition is True.
func IsReady(p *corev1.Pod) bool { return ConditionTrue(&p.Status, corev1.PodReady) }

// ReadySince is when the pod last became Ready, or nil when it is not.
func ReadySince(p *corev1.Pod) *metav1.Time {
	c := Condition(&p.Status, corev1.PodReady)
	if c == nil || c.Status != corev1.ConditionTrue {
		return nil
	}
	return &c.LastTransitionTime
}

// IsAvailable reports whether the pod has been Ready for at least
// minReadySeconds at now: Kubernetes' definition of an available replica.
// A pod Ready with no transition time is available only when
// minReadySeconds is 0, since how long it has been Ready is unknown.
func IsAvailable(p *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	since := ReadySince(p)
	if since == nil {
		return false
	}
	if minReadySeconds == 0 {
		return true
	}
	d := time.Duration(minReadySeconds) * time.Second
	return !since.IsZero() && !since.Add(d).After(now)
}

// IsTerminal reports whether the pod has finished (Succeeded or Failed):
// its containers will not run again and it holds nothing on its node.
func IsTerminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// IsActive reports whether a pod counts towards its owner's replicas:
// not finished and not being deleted.
func IsActive(p *corev1.Pod) bool { return !IsTerminal(p) && p.DeletionTimestamp == nil }

// IsMirror reports whether o is a mirror pod (annotation
// kubernetes.io/config.mirror): made by a device for one of its static
// pods, never adopted, counted or deleted by a controller.
func IsMirror(o metav1.Object) bool {
	_, ok := o.GetAnnotations()[api.AnnotationMirrorPod]
	return ok
}
