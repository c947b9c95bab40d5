package controllerutil

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/api/podutil"
	"flotilla.dev/flotilla/internal/controlloop"
)

// OwnerEvents turns the informer events of owned objects of type T (a
// ReplicaSet's pods, a Deployment's ReplicaSets) into the queue keys of
// their owners of type O, as Kubernetes' controllers do: an owned object
// wakes its controller (the one its controllerRef names, if that is still
// the same object), an orphan wakes every owner that may adopt it, and a
// change of controllerRef wakes the previous owner too. Creations and
// deletions are counted against the owner's Expectations when set.
type OwnerEvents[O, T metav1.Object] struct {
	// Kind is the owners' kind: a controllerRef to another kind is not
	// theirs.
	Kind string
	// Get reads an owner from the informer cache.
	Get func(namespace, name string) (O, error)
	// Matching lists the owners whose selector matches an orphan, the
	// ones that may adopt it; an error means none. A lister's GetPodXxx
	// method fits.
	Matching func(obj T) ([]O, error)
	// Loop is the owners' work loop.
	Loop *controlloop.Loop
	// Expectations, when set, are told of the creations and deletions of
	// owned objects, under the owner's key.
	Expectations *Expectations
	// TerminatingIsDeleted counts an update that sets deletionTimestamp
	// as the object's deletion: a pod's replacement is then made without
	// waiting out its grace period.
	TerminatingIsDeleted bool
	// Recheck, when set, is asked after each update of an owned object how
	// long until its owner must look again although nothing else changes
	// (see AvailableAfter); 0 means no need.
	Recheck func(owner O, old, cur T) time.Duration
}

// Handler is the informer handler for the owned kind.
func (h *OwnerEvents[O, T]) Handler() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{AddFunc: h.add, UpdateFunc: h.update, DeleteFunc: h.delete}
}

// Resolve returns the cached owner ref points to, if ref is of the owners'
// kind and the owner is still the same object.
func (h *OwnerEvents[O, T]) Resolve(namespace string, ref *metav1.OwnerReference) (O, bool) {
	return ResolveController(namespace, ref, h.Kind, h.Get)
}

// ResolveController returns the object of kind that ref points to, read by
// get, if it is still the object ref was written for: an owner deleted and
// recreated under the same name has a new UID and owns nothing of its
// predecessor's.
func ResolveController[O metav1.Object](namespace string, ref *metav1.OwnerReference, kind string, get func(namespace, name string) (O, error)) (O, bool) {
	var none O
	if ref == nil || ref.Kind != kind {
		return none, false
	}
	o, err := get(namespace, ref.Name)
	if err != nil || o.GetUID() != ref.UID {
		return none, false
	}
	return o, true
}

func (h *OwnerEvents[O, T]) add(obj any) {
	o, ok := obj.(T)
	if !ok {
		return
	}
	if o.GetDeletionTimestamp() != nil {
		// Seen for the first time already terminating (a re-list): its
		// deletion is what counts.
		h.delete(o)
		return
	}
	if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
		if owner, ok := h.Resolve(o.GetNamespace(), ref); ok {
			key := controlloop.ObjectKey(owner)
			if h.Expectations != nil {
				h.Expectations.CreationObserved(key)
			}
			h.Loop.EnqueueKey(key)
		}
		return
	}
	h.enqueueMatching(o)
}

func (h *OwnerEvents[O, T]) update(oldObj, curObj any) {
	// The manager's informers never resync, so every update is a change.
	old, okOld := oldObj.(T)
	cur, okCur := curObj.(T)
	if !okOld || !okCur {
		return
	}
	labelsChanged := !labels.Equals(old.GetLabels(), cur.GetLabels())
	if h.TerminatingIsDeleted && cur.GetDeletionTimestamp() != nil {
		h.delete(cur)
		if labelsChanged {
			h.delete(old)
		}
		return
	}
	oldRef, curRef := metav1.GetControllerOfNoCopy(old), metav1.GetControllerOfNoCopy(cur)
	refChanged := !sameController(oldRef, curRef)
	if refChanged && oldRef != nil {
		if owner, ok := h.Resolve(old.GetNamespace(), oldRef); ok {
			h.Loop.EnqueueKey(controlloop.ObjectKey(owner))
		}
	}
	if curRef != nil {
		owner, ok := h.Resolve(cur.GetNamespace(), curRef)
		if !ok {
			return
		}
		key := controlloop.ObjectKey(owner)
		h.Loop.EnqueueKey(key)
		if h.Recheck != nil {
			if d := h.Recheck(owner, old, cur); d > 0 {
				h.Loop.EnqueueAfter(key, d)
			}
		}
		return
	}
	if labelsChanged || refChanged {
		h.enqueueMatching(cur)
	}
}

func (h *OwnerEvents[O, T]) delete(obj any) {
	o, ok := controlloop.Deleted[T](obj)
	if !ok {
		return
	}
	owner, ok := h.Resolve(o.GetNamespace(), metav1.GetControllerOfNoCopy(o))
	if !ok {
		return
	}
	key := controlloop.ObjectKey(owner)
	if h.Expectations != nil {
		h.Expectations.DeletionObserved(key, controlloop.ObjectKey(o))
	}
	h.Loop.EnqueueKey(key)
}

// enqueueMatching wakes every owner that could adopt an orphan.
func (h *OwnerEvents[O, T]) enqueueMatching(o T) {
	owners, err := h.Matching(o)
	if err != nil {
		return // no owner matches
	}
	for _, owner := range owners {
		h.Loop.EnqueueKey(controlloop.ObjectKey(owner))
	}
}

func sameController(a, b *metav1.OwnerReference) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.UID == b.UID
}

// AvailableAfter is how long after this update of a pod its owner must
// look again: a pod that has just become Ready becomes available
// minReadySeconds later (a second's margin added), and no event will say
// so. 0 when nothing is due.
func AvailableAfter(old, cur *corev1.Pod, minReadySeconds int32) time.Duration {
	if minReadySeconds <= 0 || podutil.IsReady(old) || !podutil.IsReady(cur) {
		return 0
	}
	return time.Duration(minReadySeconds)*time.Second + time.Second
}
