package registry

import (
	"errors"
	"strings"
	"testing"
)

const dgst = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseReference(t *testing.T) {
	cases := []struct {
		in, domain, path, tag, digest, pull string
	}{
		{"nginx", "docker.io", "library/nginx", "latest", "", "docker.io/library/nginx:latest"},
		{"nginx:1.25", "docker.io", "library/nginx", "1.25", "", "docker.io/library/nginx:1.25"},
		{"nginx@" + dgst, "docker.io", "library/nginx", "", dgst, "docker.io/library/nginx@" + dgst},
		{"127.0.0.1:5000/app:v1@" + dgst, "127.0.0.1:5000", "app", "v1", dgst, "127.0.0.1:5000/app@" + dgst},
		{"registry.local/team/app@" + dgst, "registry.local", "team/app", "", dgst, "registry.local/team/app@" + dgst},
		{"localhost/app", "localhost", "app", "latest", "", "localhost/app:latest"},
	}
	for _, c := range cases {
		r, err := ParseReference(c.in)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if r.Domain != c.domain || r.Path != c.path || r.Tag != c.tag || r.Digest.String() != c.digest || r.PullName() != c.pull {
			t.Errorf("%s = %+v (pull %s)", c.in, r, r.PullName())
		}
		again, err := ParseReference(r.String())
		if err != nil || again != r {
			t.Errorf("%s: String() %q does not parse back: %+v %v", c.in, r.String(), again, err)
		}
	}
	for _, bad := range []string{"", "team/UPPER", "app@sha256:short", "a b", "app:"} {
		if _, err := ParseReference(bad); !errors.Is(err, ErrInvalidReference) {
			t.Errorf("%q: err = %v, want ErrInvalidReference", bad, err)
		}
	}
}

func TestPolicy(t *testing.T) {
	if _, err := (Policy{}).Parse("app@" + dgst); err != nil {
		t.Fatal(err)
	}
	_, err := Policy{}.Parse("registry.local/app:v1")
	if !errors.Is(err, ErrNotPinned) || !strings.Contains(err.Error(), "registry.local/app@sha256:<64 hex digits>") {
		t.Fatalf("err = %v, want ErrNotPinned saying how to pin", err)
	}
	if _, err := (Policy{AllowTags: true}).Parse("registry.local/app:v1"); err != nil {
		t.Fatal(err)
	}
}

func FuzzParseReference(f *testing.F) {
	for _, s := range []string{"nginx", "a/b:c", "h:5000/x@" + dgst, "::", "@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseReference(s)
		if err != nil {
			return
		}
		again, err := ParseReference(r.String())
		if err != nil || again != r {
			t.Fatalf("%q -> %q does not round-trip: %+v, %v", s, r.String(), again, err)
		}
	})
}
