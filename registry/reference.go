package registry

import (
	"flotilla.dev/flotilla/api/image"
)

var (
	// ErrInvalidReference is returned for a string that is not an image
	// reference; it is api/image's, so the hub's and the agent's refusals
	// test the same with errors.Is.
	ErrInvalidReference = image.ErrInvalidReference
	// ErrNotPinned is returned when the policy needs a digest and the
	// reference has only a tag.
	ErrNotPinned = image.ErrNotPinned
)

// Reference is a normalised image reference: "nginx:1.25" becomes Domain
// "docker.io", Path "library/nginx", Tag "1.25". It is api/image's type, so
// the hub and the agent read references with one grammar.
type Reference = image.Reference

// ParseReference parses and normalises an image reference the way Docker
// and Kubernetes do for a pull: a reference with neither tag nor digest
// gets "latest".
func ParseReference(s string) (Reference, error) {
	r, err := image.Parse(s)
	if err != nil {
		return Reference{}, err
	}
	return r.Defaulted(), nil
}

// Policy is the digest policy the hub's admission and the agent share
// (image.Policy): a sha256 digest is required unless the repository is
// allowed tags.
type Policy struct {
	// AllowTags accepts tag-only references from every repository (as
	// Image.AllowTags ["*"] does).
	AllowTags bool `json:"-" mapstructure:"-"`
	// Image lists the repositories allowed tags; agent.yaml's
	// "images: {allowTags: [...]}".
	Image image.Policy `json:"images,omitempty" mapstructure:"images"`
}

// policy is the image.Policy p stands for.
func (p Policy) policy() image.Policy {
	if p.AllowTags {
		return image.AllowAllTags()
	}
	return p.Image
}

// Validate checks the policy's patterns.
func (p Policy) Validate() error { return p.Image.Validate() }

// Check returns an error wrapping ErrNotPinned, with what to do about it,
// for a reference the policy refuses.
func (p Policy) Check(r Reference) error { return p.policy().Check(r) }

// Parse parses s (with "latest" for a reference with neither tag nor
// digest) and checks it against the policy.
func (p Policy) Parse(s string) (Reference, error) {
	r, err := p.policy().Parse(s)
	if err != nil {
		return Reference{}, err
	}
	return r.Defaulted(), nil
}
