package controllerutil

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestComputeHash(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "shop", "tier": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "shop/app:v1"}}},
	}
	h := ComputeHash(tmpl, nil)
	for range 20 { // map iteration order must not matter
		if got := ComputeHash(tmpl.DeepCopy(), nil); got != h {
			t.Fatalf("hash of the same template changed: %s then %s", h, got)
		}
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			t.Fatalf("hash %q has %q, not a DNS label character", h, r)
		}
	}
	other := tmpl.DeepCopy()
	other.Spec.Containers[0].Image = "shop/app:v2"
	if ComputeHash(other, nil) == h {
		t.Error("different images, same hash")
	}
	if ComputeHash(tmpl, ptr.To[int32](1)) == h {
		t.Error("collision count does not change the hash")
	}
}
