package registry

import (
	"errors"
	"fmt"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
)

var (
	// ErrInvalidReference is returned for a string that is not an image reference.
	ErrInvalidReference = errors.New("invalid image reference")
	// ErrNotPinned is returned when the policy needs a digest and the
	// reference has only a tag.
	ErrNotPinned = errors.New("image reference is not pinned to a digest")
)

// Reference is a normalised image reference: "nginx:1.25" becomes Domain
// "docker.io", Path "library/nginx", Tag "1.25".
type Reference struct {
	Domain string
	Path   string
	Tag    string
	Digest digest.Digest
}

// ParseReference parses and normalises an image reference the way Docker
// and Kubernetes do; a reference with neither tag nor digest gets "latest"
// (TagNameOnly leaves digest references alone).
func ParseReference(s string) (Reference, error) {
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return Reference{}, fmt.Errorf("%w %q: %v", ErrInvalidReference, s, err)
	}
	named = reference.TagNameOnly(named)
	r := Reference{Domain: reference.Domain(named), Path: reference.Path(named)}
	if t, ok := named.(reference.Tagged); ok {
		r.Tag = t.Tag()
	}
	if d, ok := named.(reference.Digested); ok {
		r.Digest = d.Digest()
	}
	return r, nil
}

// Name is the repository: "docker.io/library/nginx".
func (r Reference) Name() string { return r.Domain + "/" + r.Path }

// Pinned reports whether the reference names a digest.
func (r Reference) Pinned() bool { return r.Digest != "" }

// String is the full normalised reference, tag and digest included.
func (r Reference) String() string {
	s := r.Name()
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest.String()
	}
	return s
}

// PullName is what is resolved and what the image is called in
// containerd: by digest when there is one (a tag beside it is only a
// label), else by tag.
func (r Reference) PullName() string {
	if r.Digest != "" {
		return r.Name() + "@" + r.Digest.String()
	}
	return r.Name() + ":" + r.Tag
}

// Policy is the digest policy the hub's admission and the agent share.
type Policy struct {
	// AllowTags accepts tag-only references; by default a digest is required.
	AllowTags bool
}

// Check returns ErrNotPinned, with what to do about it, for a tag-only
// reference under a policy that requires digests.
func (p Policy) Check(r Reference) error {
	if r.Pinned() || p.AllowTags {
		return nil
	}
	return fmt.Errorf("%w: %q names only the tag %q; pin it as %s@sha256:<digest> (the digest is printed by the push, or by the registry's manifest endpoint), or allow tags in the image policy", ErrNotPinned, r.String(), r.Tag, r.Name())
}

// Parse parses s and checks it against the policy.
func (p Policy) Parse(s string) (Reference, error) {
	r, err := ParseReference(s)
	if err != nil {
		return Reference{}, err
	}
	if err := p.Check(r); err != nil {
		return Reference{}, err
	}
	return r, nil
}
