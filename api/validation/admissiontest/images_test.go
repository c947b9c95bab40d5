package admissiontest

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiimage "flotilla.dev/flotilla/api/image"
	"flotilla.dev/flotilla/hub/hubtest"
)

// TestHubRefusesTagOnlyImages: the hub answers 422 naming the field and
// saying how to pin, with the message api/image gives the agent too.
func TestHubRefusesTagOnlyImages(t *testing.T) {
	h := hubtest.Start(t)
	c := ctx(t)
	_, err := h.Client.CoreV1().Pods("default").Create(c, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "tagged"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "tag", Image: "nginx:1.27"},
			{Name: "pinned", Image: image},
			{Name: "broken", Image: "registry.local/App:1"},
		}},
	}, metav1.CreateOptions{})
	got := causes(t, err)
	if err.(apierrors.APIStatus).Status().Code != 422 {
		t.Fatalf("code %d, want 422", err.(apierrors.APIStatus).Status().Code)
	}
	if got["spec.containers[0].image"] != metav1.CauseTypeFieldValueInvalid || got["spec.containers[2].image"] != metav1.CauseTypeFieldValueInvalid || len(got) != 2 {
		t.Fatalf("causes %v, want spec.containers[0].image and [2] Invalid", got)
	}
	for _, want := range []string{
		"pin the image by digest: nginx@sha256:<64 hex digits>",
		`the digest the tag "1.27" points to now`,
		"not a valid image reference",
		`repository path component "App" must be lowercase`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("422 does not say %q: %v", want, err)
		}
	}

	labels := map[string]string{"app": "web"}
	_, err = h.Client.AppsV1().Deployments("default").Create(c, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.local/shop/app"}}},
			},
		},
	}, metav1.CreateOptions{})
	if got := causes(t, err); got["spec.template.spec.containers[0].image"] != metav1.CauseTypeFieldValueInvalid {
		t.Fatalf("causes %v", got)
	}
	if !strings.Contains(err.Error(), "registry.local/shop/app@sha256:<64 hex digits>") || !strings.Contains(err.Error(), `"latest"`) {
		t.Errorf("422 does not say how to pin: %v", err)
	}
}

// TestHubAllowsTagsWhereThePolicySays: --allow-tags admits tags for the
// repositories it names, and only those.
func TestHubAllowsTagsWhereThePolicySays(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{Images: apiimage.Policy{AllowTags: []string{"registry.local:5000/dev/*"}}})
	c := ctx(t)
	pod := func(name, img string) error {
		_, err := h.Client.CoreV1().Pods("default").Create(c, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: img}}},
		}, metav1.CreateOptions{})
		return err
	}
	if err := pod("dev", "registry.local:5000/dev/app:1.2"); err != nil {
		t.Fatalf("a tag in an allowed repository: %v", err)
	}
	err := pod("prod", "registry.local:5000/prod/app:1.2")
	if got := causes(t, err); got["spec.containers[0].image"] != metav1.CauseTypeFieldValueInvalid {
		t.Fatalf("a tag outside the allowed repositories: causes %v (%v)", got, err)
	}
}
