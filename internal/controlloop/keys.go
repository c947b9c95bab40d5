package controlloop

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// Key returns the queue key of an informer object: "namespace/name", or
// "name" for cluster-scoped objects. It understands the tombstones
// (cache.DeletedFinalStateUnknown) informers hand to delete handlers.
func Key(obj any) (string, error) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return "", fmt.Errorf("queue key for %T: %w", obj, err)
	}
	return key, nil
}

// Deleted returns the object a delete handler was given, unwrapping the
// tombstone (cache.DeletedFinalStateUnknown) an informer hands over when it
// missed the delete itself; ok is false when it is not a T.
func Deleted[T any](obj any) (T, bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	t, ok := obj.(T)
	return t, ok
}

// ObjectKey is the queue key of obj: "namespace/name", or "name" for a
// cluster-scoped object. Unlike Key it cannot fail, since obj is known to
// have metadata; every key a loop builds by hand is built here, so that
// the keys it enqueues and the ones it looks up are always alike.
func ObjectKey(obj metav1.Object) string { return NameKey(obj.GetNamespace(), obj.GetName()) }

// NameKey is the queue key of the object namespace/name, for a loop that
// knows an object only by name (from a label, a reference or a caller).
func NameKey(namespace, name string) string { return cache.NewObjectName(namespace, name).String() }
