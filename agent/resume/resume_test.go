package resume

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestNewerVersion(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"10", "9", true}, {"9", "10", false}, {"7", "7", false},
		{"x", "7", true}, {"7", "7x", true}, {"x", "x", false},
	} {
		if got := NewerVersion(c.a, c.b); got != c.want {
			t.Errorf("NewerVersion(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestCheckReached(t *testing.T) {
	hubAt := func(rv string) func(context.Context, metav1.ListOptions) (runtime.Object, error) {
		return func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if o.Limit != 1 {
				t.Errorf("the probe asked for %d objects, want 1", o.Limit)
			}
			return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: rv}}, nil
		}
	}
	if err := CheckReached(context.Background(), hubAt("12"), "9"); err != nil {
		t.Errorf("a hub ahead of the stored version: %v", err)
	}
	if err := CheckReached(context.Background(), hubAt("9"), "9"); err != nil {
		t.Errorf("a hub at the stored version: %v", err)
	}
	if err := CheckReached(context.Background(), hubAt("4"), "9"); !apierrors.IsResourceExpired(err) {
		t.Errorf("a hub behind the stored version: %v, want 410 Expired", err)
	}
	down := apierrors.NewServiceUnavailable("away")
	if err := CheckReached(context.Background(), func(context.Context, metav1.ListOptions) (runtime.Object, error) { return nil, down }, "9"); err != down {
		t.Errorf("a hub that does not answer: %v, want its error", err)
	}
}
