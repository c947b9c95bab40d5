package controlloop

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestKey(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/gone", Obj: pod}
	for _, tc := range []struct {
		obj  any
		want string
	}{{pod, "ns/p"}, {node, "n1"}, {tomb, "ns/gone"}} {
		got, err := Key(tc.obj)
		if err != nil || got != tc.want {
			t.Errorf("Key(%T) = %q, %v; want %q", tc.obj, got, err, tc.want)
		}
	}
	if _, err := Key(42); err == nil {
		t.Error("Key(42) succeeded, want an error")
	}
}

func TestDeletedUnwrapsTombstones(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	for _, obj := range []any{pod, cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod}} {
		if got, ok := Deleted[*corev1.Pod](obj); !ok || got != pod {
			t.Errorf("Deleted[*Pod](%T) = %v, %v; want the pod", obj, got, ok)
		}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	for _, obj := range []any{node, cache.DeletedFinalStateUnknown{Key: "n1", Obj: node}, nil} {
		if got, ok := Deleted[*corev1.Pod](obj); ok {
			t.Errorf("Deleted[*Pod](%T) = %v, true; want not ok", obj, got)
		}
	}
}

func TestObjectKeyAgreesWithKey(t *testing.T) {
	for _, obj := range []metav1.Object{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
	} {
		want, err := Key(obj)
		if err != nil {
			t.Fatal(err)
		}
		if got := ObjectKey(obj); got != want {
			t.Errorf("ObjectKey(%s) = %q, Key = %q; want them alike", obj.GetName(), got, want)
		}
	}
	if got := ObjectKey(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}); got != "ns/p" {
		t.Errorf("ObjectKey(pod ns/p) = %q, want ns/p", got)
	}
	if got := NameKey("ns", "p"); got != "ns/p" {
		t.Errorf("NameKey(ns, p) = %q, want ns/p", got)
	}
	if got := NameKey("", "n1"); got != "n1" {
		t.Errorf("NameKey of a cluster-scoped name = %q, want n1", got)
	}
}
