package controllerutil

import (
	"errors"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestPodFromTemplate(t *testing.T) {
	owner := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-abc", UID: "rs-uid"}}
	tmpl := &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "ignored",
			Labels:      map[string]string{"app": "web"},
			Annotations: map[string]string{"note": "x"},
			Finalizers:  []string{"example.com/keep"},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "web:v1"}}},
	}
	gvk := appsv1.SchemeGroupVersion.WithKind("ReplicaSet")
	pod := PodFromTemplate(tmpl, owner, gvk)

	if pod.Name != "" || pod.GenerateName != "web-abc-" || pod.Namespace != "shop" {
		t.Errorf("name %q generateName %q namespace %q; want a generated name web-abc- in shop", pod.Name, pod.GenerateName, pod.Namespace)
	}
	if pod.Labels["app"] != "web" || pod.Annotations["note"] != "x" || len(pod.Finalizers) != 1 {
		t.Errorf("labels %v annotations %v finalizers %v; want the template's", pod.Labels, pod.Annotations, pod.Finalizers)
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.UID != "rs-uid" || ref.Kind != "ReplicaSet" || ref.APIVersion != "apps/v1" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("controller ref %+v; want ReplicaSet rs-uid with blockOwnerDeletion", ref)
	}
	if len(pod.Spec.Containers) != 1 || pod.Spec.Containers[0].Image != "web:v1" {
		t.Errorf("spec %+v; want the template's", pod.Spec)
	}

	// The pod is the caller's to change: the template must not follow.
	pod.Labels["app"] = "changed"
	pod.Annotations["note"] = "changed"
	pod.Finalizers[0] = "changed"
	pod.Spec.Containers[0].Image = "changed"
	if tmpl.Labels["app"] != "web" || tmpl.Annotations["note"] != "x" || tmpl.Finalizers[0] != "example.com/keep" || tmpl.Spec.Containers[0].Image != "web:v1" {
		t.Errorf("changing the pod changed the template: %+v", tmpl)
	}
}

func TestSlowStartBatch(t *testing.T) {
	var n atomic.Int32
	ok, err := SlowStartBatch(10, 1, func() error {
		if n.Add(1) > 4 {
			return errors.New("boom")
		}
		return nil
	})
	// Batches 1, 2, 4: calls are concurrent within a batch, but the count
	// of failures is fixed: calls 5..7 fail, so the run stops after the
	// third batch with 4 successes.
	if calls := n.Load(); err == nil || calls != 7 || ok != 4 {
		t.Fatalf("calls %d successes %d err %v, want 7, 4, error", calls, ok, err)
	}
}

func TestSlowStartBatchAllSucceed(t *testing.T) {
	var n atomic.Int32
	ok, err := SlowStartBatch(5, 2, func() error { n.Add(1); return nil })
	if err != nil || ok != 5 || n.Load() != 5 {
		t.Fatalf("successes %d calls %d err %v, want 5, 5, nil", ok, n.Load(), err)
	}
	if ok, err := SlowStartBatch(0, 1, func() error { t.Error("called for count 0"); return nil }); ok != 0 || err != nil {
		t.Fatalf("count 0: %d, %v", ok, err)
	}
}
