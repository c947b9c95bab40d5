package image

import (
	"errors"
	"fmt"
)

// ErrInvalidPolicy is wrapped by Policy.Validate's errors.
var ErrInvalidPolicy = errors.New("invalid image policy")

// Policy is the digest policy the hub's admission and the agent share: a
// reference must be pinned by a sha256 digest unless its repository matches
// one of AllowTags. The zero value requires digests everywhere.
//
// In configuration (hub flags, agent.yaml) it reads:
//
//	allowTags: ["registry.local:5000/*", "docker.io/library/busybox"]
type Policy struct {
	// AllowTags are Patterns of repositories that may be referenced by tag
	// alone; "*" allows every repository.
	AllowTags []string `json:"allowTags,omitempty" mapstructure:"allowTags"`
}

// AllowAllTags is the policy that admits every tag-only reference.
func AllowAllTags() Policy { return Policy{AllowTags: []string{"*"}} }

// Validate checks every pattern, naming each one at fault.
func (p Policy) Validate() error {
	var errs []error
	for i, s := range p.AllowTags {
		if _, err := ParsePattern(s); err != nil {
			errs = append(errs, fmt.Errorf("%w: allowTags[%d]: %w", ErrInvalidPolicy, i, err))
		}
	}
	return errors.Join(errs...)
}

// TagsAllowed reports whether r's repository may be referenced by tag.
// Invalid patterns match nothing (Validate reports them).
func (p Policy) TagsAllowed(r Reference) bool {
	for _, s := range p.AllowTags {
		if pat, err := ParsePattern(s); err == nil && pat.Match(r) {
			return true
		}
	}
	return false
}

// Check returns nil for a reference the policy accepts, and otherwise an
// *Error wrapping ErrNotPinned whose Reason says how to pin it.
//
// A sha256 digest is what pins: it is what registries and containerd
// address content by and what cosign signs, so a sha384 or sha512 digest,
// though it parses, is refused where digests are required.
func (p Policy) Check(r Reference) error {
	if r.PinnedSHA256() || p.TagsAllowed(r) {
		return nil
	}
	name := r.FamiliarName()
	if r.Digest != "" {
		return &Error{Input: r.String(), Kind: ErrNotPinned, Reason: fmt.Sprintf(
			"pin the image by a sha256 digest: %s@sha256:<64 hex digits> (registries and signatures address images by sha256)", name)}
	}
	tag := r.Tag
	if tag == "" {
		tag = DefaultTag
	}
	return &Error{Input: r.String(), Kind: ErrNotPinned, Reason: fmt.Sprintf(
		"pin the image by digest: %s@sha256:<64 hex digits> (the digest the tag %q points to now, as the push printed it); "+
			"a tag can move, so tag-only images are refused unless the image policy's allowTags matches %s", name, tag, r.Name())}
}

// Parse parses s and checks it against the policy; the error's Input is s
// as given.
func (p Policy) Parse(s string) (Reference, error) {
	r, err := Parse(s)
	if err != nil {
		return Reference{}, err
	}
	if err := p.Check(r); err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Input = s
		}
		return Reference{}, err
	}
	return r, nil
}
