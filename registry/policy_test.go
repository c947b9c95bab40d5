package registry

import (
	"errors"
	"strings"
	"testing"

	"flotilla.dev/flotilla/api/image"
)

// The agent's policy is api/image's: the same references are refused as
// by the hub, with the same advice, and allowTags patterns apply per
// repository.
func TestPolicyPatterns(t *testing.T) {
	p := Policy{Image: image.Policy{AllowTags: []string{"registry.local:5000/*", "docker.io/library/busybox"}}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{"registry.local:5000/team/app:v1", "busybox", "busybox:1.36", "nginx@" + dgst} {
		r, err := p.Parse(ok)
		if err != nil {
			t.Errorf("%s: %v", ok, err)
			continue
		}
		if !r.Pinned() && r.Tag == "" {
			t.Errorf("%s: no default tag: %+v", ok, r)
		}
	}
	for _, refused := range []string{"nginx:1.27", "registry.local/app:v1", "team/busybox"} {
		_, err := p.Parse(refused)
		var e *image.Error
		if !errors.Is(err, ErrNotPinned) || !errors.As(err, &e) || e.Input != refused || !strings.Contains(e.Reason, "allowTags") {
			t.Errorf("%s: err = %v", refused, err)
		}
	}
	if err := (Policy{Image: image.Policy{AllowTags: []string{"bad//pattern"}}}).Validate(); !errors.Is(err, image.ErrInvalidPolicy) {
		t.Fatalf("Validate = %v", err)
	}
	if _, err := NewPuller(nil, PullerConfig{Namespace: "x", Policy: Policy{Image: image.Policy{AllowTags: []string{"a//b"}}}}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("NewPuller accepted an invalid policy: %v", err)
	}
}
