package validation

import (
	"regexp"

	"k8s.io/apimachinery/pkg/util/validation/field"

	apiimage "flotilla.dev/flotilla/api/image"
)

// The hub once parsed references by hand here; the grammar is api/image's
// now. TestParseImage and FuzzParseImage still pin what admission accepts,
// through this adapter: name is the repository as written (without tag
// and digest), tag and digest are empty when not written.

type imageRef struct {
	name, tag, digest string
}

var sha256Digest = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

func parseImage(s string) (imageRef, error) {
	r, err := apiimage.Parse(s)
	if err != nil {
		return imageRef{}, err
	}
	name := s
	if r.Digest != "" {
		name = name[:len(name)-len("@"+r.Digest.String())]
	}
	if r.Tag != "" {
		name = name[:len(name)-len(":"+r.Tag)]
	}
	return imageRef{name: name, tag: r.Tag, digest: r.Digest.String()}, nil
}

func validateImage(img string, path *field.Path, allowTags bool) field.ErrorList {
	return checkImage(img, path, imagePolicy(allowTags))
}
