package validation

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateImages is the hub's image policy for a pod spec (of a Pod or of a
// workload's template) at path: every image reference must parse, and
// unless allowTags it must be pinned by digest, "name@sha256:<64 hex>", so
// that every device runs exactly the bytes that were reviewed. Empty images
// are left to ValidateCreate, which reports them as required.
func ValidateImages(spec *corev1.PodSpec, path *field.Path, allowTags bool) field.ErrorList {
	return validateImages(spec, nil, path, allowTags)
}

// validateImages checks the images of spec; a container whose image is the
// same as in old (same list, same name) is not checked again.
func validateImages(spec, old *corev1.PodSpec, path *field.Path, allowTags bool) field.ErrorList {
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
			errs = append(errs, validateImage(c.Image, path.Child(name).Index(i).Child("image"), allowTags)...)
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

func validateImage(image string, path *field.Path, allowTags bool) field.ErrorList {
	ref, err := parseImage(image)
	if err != nil {
		return field.ErrorList{field.Invalid(path, image, fmt.Sprintf("not a valid image reference: %v", err))}
	}
	if allowTags || strings.HasPrefix(ref.digest, "sha256:") {
		return nil
	}
	if ref.digest != "" {
		return field.ErrorList{field.Invalid(path, image, fmt.Sprintf("pin the image by a sha256 digest: %s@sha256:<64 hex digits>", ref.name))}
	}
	return field.ErrorList{field.Invalid(path, image, fmt.Sprintf(
		"pin the image by digest: %s@sha256:<64 hex digits> (the digest the tag points to now); "+
			"a tag can move, so the hub refuses tag-only images unless it is configured to allow them", ref.name))}
}

// imageRef is an image reference split into its parts: name is the
// repository with its optional registry host, digest is "algorithm:hex".
type imageRef struct {
	name, tag, digest string
}

// The grammar of github.com/distribution/reference, written out here so
// that the hub's admission and the agent read references the same way.
var (
	pathComponent = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)
	domainPart    = regexp.MustCompile(`^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*(?::[0-9]+)?$`)
	ipv6Domain    = regexp.MustCompile(`^\[[a-fA-F0-9:]+\](?::[0-9]+)?$`)
	tagPattern    = regexp.MustCompile(`^[\w][\w.-]{0,127}$`)
	sha256Digest  = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)
	otherDigest   = regexp.MustCompile(`^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}$`)
)

const maxImageNameLength = 255

var errEmptyImage = errors.New("must not be empty")

func parseImage(s string) (imageRef, error) {
	var ref imageRef
	if s == "" {
		return ref, errEmptyImage
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return ref, errors.New("must not contain whitespace")
	}
	rest, digest, hasDigest := strings.Cut(s, "@")
	if hasDigest {
		if strings.HasPrefix(digest, "sha256:") && !sha256Digest.MatchString(digest) {
			return ref, fmt.Errorf("digest %q must be sha256: followed by 64 lowercase hex digits", digest)
		}
		if !otherDigest.MatchString(digest) {
			return ref, fmt.Errorf("digest %q is not of the form algorithm:hex", digest)
		}
		ref.digest = digest
	}
	if i := strings.LastIndexByte(rest, ':'); i > strings.LastIndexByte(rest, '/') {
		ref.tag = rest[i+1:]
		rest = rest[:i]
		if !tagPattern.MatchString(ref.tag) {
			return ref, fmt.Errorf("tag %q must be at most 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'", ref.tag)
		}
	}
	if rest == "" {
		return ref, errors.New("repository name must not be empty")
	}
	if len(rest) > maxImageNameLength {
		return ref, fmt.Errorf("repository name must be at most %d characters", maxImageNameLength)
	}
	comps := strings.Split(rest, "/")
	if first := comps[0]; len(comps) > 1 && (strings.ContainsAny(first, ".:[") || first == "localhost" || first != strings.ToLower(first)) {
		if !domainPart.MatchString(first) && !ipv6Domain.MatchString(first) {
			return ref, fmt.Errorf("registry host %q is not a valid host[:port]", first)
		}
		comps = comps[1:]
	}
	for _, c := range comps {
		if !pathComponent.MatchString(c) {
			return ref, fmt.Errorf("repository path component %q must be lowercase letters and digits, separated by '.', '_', '__' or '-'", c)
		}
	}
	ref.name = rest
	return ref, nil
}
