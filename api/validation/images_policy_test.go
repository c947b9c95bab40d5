package validation

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	apiimage "flotilla.dev/flotilla/api/image"
)

// The hub's digest policy may allow tags per repository, with the patterns
// the agent reads (api/image).
func TestImagePolicyPatterns(t *testing.T) {
	spec := &corev1.PodSpec{Containers: []corev1.Container{
		{Name: "local", Image: "registry.local:5000/team/app:v1"},
		{Name: "busybox", Image: "busybox:1.36"},
		{Name: "nginx", Image: "nginx:1.27"},
		{Name: "pinned", Image: image},
	}}
	opts := Options{Images: apiimage.Policy{AllowTags: []string{"registry.local:5000/*", "docker.io/library/busybox"}}}
	errs := ValidateImagesPolicy(spec, field.NewPath("spec"), opts.ImagePolicy())
	expectErrors(t, errs, invalid("spec.containers[2].image"))
	if !strings.Contains(joinErrs(errs), "allowTags matches docker.io/library/nginx") {
		t.Errorf("error does not say which pattern would allow it: %s", joinErrs(errs))
	}
	// AllowTagImages allows every repository, whatever the patterns.
	opts.AllowTagImages = true
	expectErrors(t, ValidateImagesPolicy(spec, field.NewPath("spec"), opts.ImagePolicy()))
	// Create and update go through the same policy.
	p := validPod()
	p.Spec.Containers[0].Image = "busybox:1.36"
	if errs := ValidateCreate(p, Options{Images: apiimage.Policy{AllowTags: []string{"busybox"}}}); len(errs) != 0 {
		t.Fatalf("create: %v", errs)
	}
	expectErrors(t, ValidateCreate(p, Options{}), invalid("spec.containers[0].image"))
}
