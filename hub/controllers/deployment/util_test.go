package deployment

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestResolveFenceposts(t *testing.T) {
	for _, tc := range []struct {
		surge, unavail intstr.IntOrString
		desired        int32
		wantS, wantU   int32
	}{
		{intstr.FromString("25%"), intstr.FromString("25%"), 10, 3, 2}, // surge rounds up, unavailable down
		{intstr.FromInt32(1), intstr.FromInt32(0), 3, 1, 0},
		{intstr.FromInt32(0), intstr.FromInt32(0), 3, 0, 1}, // never stuck
		{intstr.FromString("10%"), intstr.FromString("10%"), 3, 1, 0},
		{intstr.FromString("50%"), intstr.FromString("50%"), 3, 2, 1},
		{intstr.FromString("100%"), intstr.FromString("0%"), 100, 100, 0},
	} {
		s, u, err := ResolveFenceposts(&tc.surge, &tc.unavail, tc.desired)
		if err != nil || s != tc.wantS || u != tc.wantU {
			t.Errorf("ResolveFenceposts(%s, %s, %d) = %d, %d, %v; want %d, %d", tc.surge.String(), tc.unavail.String(), tc.desired, s, u, err, tc.wantS, tc.wantU)
		}
	}
	bad := intstr.FromString("lots")
	if _, _, err := ResolveFenceposts(&bad, nil, 3); err == nil {
		t.Error("ResolveFenceposts accepted maxSurge \"lots\"")
	}
}

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
