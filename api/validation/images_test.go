package validation

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestParseImage(t *testing.T) {
	hex := strings.TrimPrefix(digest, "sha256:")
	cases := []struct {
		in                string
		name, tag, digest string
		bad               bool
	}{
		{in: "nginx", name: "nginx"},
		{in: "nginx:1.27", name: "nginx", tag: "1.27"},
		{in: "docker.io/library/nginx:1.27@" + digest, name: "docker.io/library/nginx", tag: "1.27", digest: digest},
		{in: "localhost:5000/app@" + digest, name: "localhost:5000/app", digest: digest},
		{in: "localhost/app", name: "localhost/app"},
		{in: "[::1]:5000/app:v1", name: "[::1]:5000/app", tag: "v1"},
		{in: "Registry.Local/a/b_c__d-e.f:v1_2", name: "Registry.Local/a/b_c__d-e.f", tag: "v1_2"},
		{in: "reg.local:5000/app", name: "reg.local:5000/app"},
		{in: "app@sha512:" + hex + hex, name: "app", digest: "sha512:" + hex + hex},
		{in: "", bad: true},
		{in: "Nginx", bad: true},
		{in: "nginx:", bad: true},
		{in: "nginx:-x", bad: true},
		{in: "a//b", bad: true},
		{in: "my image", bad: true},
		{in: "nginx@sha256:abc", bad: true},
		{in: "nginx@sha256:" + strings.ToUpper(hex), bad: true},
		{in: "nginx@" + hex, bad: true},
		{in: "reg_istry.local/app", bad: true},
		{in: strings.Repeat("a", 256), bad: true},
	}
	for _, tc := range cases {
		ref, err := parseImage(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("parseImage(%q) = %+v, want an error", tc.in, ref)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseImage(%q): %v", tc.in, err)
			continue
		}
		if ref.name != tc.name || ref.tag != tc.tag || ref.digest != tc.digest {
			t.Errorf("parseImage(%q) = %+v, want name %q tag %q digest %q", tc.in, ref, tc.name, tc.tag, tc.digest)
		}
	}
}

func TestValidateImages(t *testing.T) {
	hex := strings.TrimPrefix(digest, "sha256:")
	spec := &corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Image: "busybox:1.36"}},
		Containers: []corev1.Container{
			{Name: "pinned", Image: image},
			{Name: "tag-and-digest", Image: "registry.local/app:1.0@" + digest},
			{Name: "latest", Image: "registry.local/app"},
			{Name: "sha512", Image: "registry.local/app@sha512:" + hex + hex},
			{Name: "broken", Image: "registry.local/App:1"},
			{Name: "empty"},
		},
	}
	path := field.NewPath("spec", "template", "spec")
	errs := ValidateImages(spec, path, false)
	expectErrors(t, errs,
		invalid("spec.template.spec.initContainers[0].image"),
		invalid("spec.template.spec.containers[2].image"),
		invalid("spec.template.spec.containers[3].image"),
		invalid("spec.template.spec.containers[4].image"))
	msgs := joinErrs(errs)
	for _, want := range []string{
		"pin the image by digest: busybox@sha256:<64 hex digits>",
		"pin the image by digest: registry.local/app@sha256:<64 hex digits>",
		"pin the image by a sha256 digest",
		"not a valid image reference",
	} {
		if !strings.Contains(msgs, want) {
			t.Errorf("errors do not say %q:\n  %s", want, msgs)
		}
	}
	// Allowing tags still refuses references that do not parse.
	expectErrors(t, ValidateImages(spec, path, true), invalid("spec.template.spec.containers[4].image"))
}
