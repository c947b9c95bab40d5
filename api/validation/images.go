package validation

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	apiimage "flotilla.dev/flotilla/api/image"
)

// ValidateImages is the hub's image policy for a pod spec (of a Pod or of a
// workload's template) at path: every image reference must parse, and
// unless allowTags it must be pinned by digest, "name@sha256:<64 hex>", so
// that every device runs exactly the bytes that were reviewed. Empty images
// are left to ValidateCreate, which reports them as required.
func ValidateImages(spec *corev1.PodSpec, path *field.Path, allowTags bool) field.ErrorList {
	return validateImages(spec, nil, path, imagePolicy(allowTags))
}

// ValidateImagesPolicy is ValidateImages under a digest policy that may
// allow tags for some repositories only. The grammar and the policy are
// api/image's, which the agent applies again before it pulls.
func ValidateImagesPolicy(spec *corev1.PodSpec, path *field.Path, policy apiimage.Policy) field.ErrorList {
	return validateImages(spec, nil, path, policy)
}

// validateImages checks the images of spec; a container whose image is the
// same as in old (same list, same name) is not checked again.
func validateImages(spec, old *corev1.PodSpec, path *field.Path, policy apiimage.Policy) field.ErrorList {
	var errs field.ErrorList
	unchanged := func(list []corev1.Container, name, image string) bool {
		for _, c := range list {
			if c.Name == name {
				return c.Image == image
			}
		}
		return false
	}
	check := func(cs []corev1.Container, oldCs []corev1.Container, name string) {
		for i, c := range cs {
			if c.Image == "" || (old != nil && unchanged(oldCs, c.Name, c.Image)) {
				continue
			}
			errs = append(errs, checkImage(c.Image, path.Child(name).Index(i).Child("image"), policy)...)
		}
	}
	var oldInit, oldCs, oldEph []corev1.Container
	if old != nil {
		oldInit, oldCs = old.InitContainers, old.Containers
		oldEph = ephemeralAsContainers(old.EphemeralContainers)
	}
	check(spec.InitContainers, oldInit, "initContainers")
	check(spec.Containers, oldCs, "containers")
	check(ephemeralAsContainers(spec.EphemeralContainers), oldEph, "ephemeralContainers")
	return errs
}

func ephemeralAsContainers(ecs []corev1.EphemeralContainer) []corev1.Container {
	cs := make([]corev1.Container, len(ecs))
	for i, ec := range ecs {
		cs[i] = corev1.Container(ec.EphemeralContainerCommon)
	}
	return cs
}

// checkImage applies the shared grammar and digest policy of api/image to
// one image; the detail says what to do, since it reaches people as the
// 422's message.
func checkImage(img string, path *field.Path, policy apiimage.Policy) field.ErrorList {
	ref, err := apiimage.Parse(img)
	if err != nil {
		return field.ErrorList{field.Invalid(path, img, "not a valid image reference: "+reason(err))}
	}
	if err := policy.Check(ref); err != nil {
		return field.ErrorList{field.Invalid(path, img, reason(err))}
	}
	return nil
}

// reason is the part of an api/image error meant for people.
func reason(err error) string {
	var e *apiimage.Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return err.Error()
}

// imagePolicy is the digest policy for allowTags, the hub's
// --allow-tag-images switch.
func imagePolicy(allowTags bool) apiimage.Policy {
	if allowTags {
		return apiimage.AllowAllTags()
	}
	return apiimage.Policy{}
}
