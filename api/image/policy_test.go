package image

import (
	"errors"
	"strings"
	"testing"
)

func TestPattern(t *testing.T) {
	cases := []struct {
		pattern string
		norm    string
		match   []string
		miss    []string
	}{
		{"*", "*", []string{"nginx", "a.b/c/d", "[::1]:5/x"}, nil},
		{"busybox", "docker.io/library/busybox", []string{"busybox:1.36", "docker.io/library/busybox", "index.docker.io/busybox@" + dgst}, []string{"busybox2", "team/busybox", "registry.local/busybox"}},
		{"docker.io/library/busybox", "docker.io/library/busybox", []string{"busybox"}, []string{"library/busyboxx"}},
		{"registry.local:5000/*", "registry.local:5000/*", []string{"registry.local:5000/app", "registry.local:5000/team/app:v1"}, []string{"registry.local/app", "registry.local:50000/app"}},
		{"registry.local:5000", "registry.local:5000/*", []string{"registry.local:5000/team/app"}, []string{"registry.local/app"}},
		{"Registry.Local/team/*", "registry.local/team/*", []string{"registry.local/team/app", "REGISTRY.local/team/a/b"}, []string{"registry.local/other/app"}},
		{"docker.io", "docker.io/*", []string{"nginx", "team/app"}, []string{"quay.io/x"}},
		{"index.docker.io", "docker.io/*", []string{"nginx"}, nil},
		{"docker.io/library/*", "docker.io/library/*", []string{"nginx", "busybox"}, []string{"team/app"}},
		{"*.local/app", "*.local/app", []string{"a.local/app", "b.c.local/app"}, []string{"a.local/app2", "a.com/app"}},
		{"team/*-cache", "docker.io/team/*-cache", []string{"team/apt-cache", "team/a/b-cache"}, []string{"team/apt-cache2"}},
		{"busy*", "docker.io/library/busy*", []string{"busybox"}, []string{"team/busybox"}},
	}
	for _, c := range cases {
		p, err := ParsePattern(c.pattern)
		if err != nil {
			t.Errorf("ParsePattern(%q): %v", c.pattern, err)
			continue
		}
		if p.Normalized() != c.norm || p.String() != c.pattern {
			t.Errorf("ParsePattern(%q) = %q (%q), want %q", c.pattern, p.Normalized(), p.String(), c.norm)
		}
		for _, ref := range c.match {
			if r, err := Parse(ref); err != nil || !p.Match(r) {
				t.Errorf("%q does not match %q (%v)", c.pattern, ref, err)
			}
		}
		for _, ref := range c.miss {
			if r, err := Parse(ref); err != nil || p.Match(r) {
				t.Errorf("%q matches %q (%v)", c.pattern, ref, err)
			}
		}
	}
	for _, bad := range []string{"", "nginx:1.2.3", "reg.local/app:v1", "app@" + dgst, "UPPER", "a//b", "reg_x.local/*", "bad:port"} {
		if _, err := ParsePattern(bad); !errors.Is(err, ErrInvalidPattern) {
			t.Errorf("ParsePattern(%q) = %v, want ErrInvalidPattern", bad, err)
		}
	}
}

func TestGlob(t *testing.T) {
	cases := []struct {
		p, s string
		want bool
	}{
		{"", "", true}, {"*", "", true}, {"a*", "a", true}, {"*a", "ba", true}, {"*a", "ab", false},
		{"a*b*c", "aXbYbZc", true}, {"a*b*c", "aXbYbZ", false}, {"**", "x/y", true}, {"a", "b", false}, {"ab", "a", false},
	}
	for _, c := range cases {
		if got := glob(c.p, c.s); got != c.want {
			t.Errorf("glob(%q, %q) = %v", c.p, c.s, got)
		}
	}
}

func TestPolicy(t *testing.T) {
	strict := Policy{}
	if _, err := strict.Parse("app@" + dgst); err != nil {
		t.Fatal(err)
	}
	_, err := strict.Parse("registry.local/app:v1")
	var e *Error
	if !errors.Is(err, ErrNotPinned) || !errors.As(err, &e) || e.Input != "registry.local/app:v1" ||
		!strings.Contains(e.Reason, "pin the image by digest: registry.local/app@sha256:<64 hex digits>") || !strings.Contains(e.Reason, "allowTags") {
		t.Fatalf("err = %v, want ErrNotPinned saying how to pin", err)
	}
	_, err = strict.Parse("busybox")
	if !errors.Is(err, ErrNotPinned) || !strings.Contains(err.Error(), "busybox@sha256:<64 hex digits>") || !strings.Contains(err.Error(), `"latest"`) {
		t.Fatalf("err = %v", err)
	}
	_, err = strict.Parse("app@sha512:" + hex + hex)
	if !errors.Is(err, ErrNotPinned) || !strings.Contains(err.Error(), "pin the image by a sha256 digest") {
		t.Fatalf("err = %v", err)
	}
	if _, err := strict.Parse("app:"); !errors.Is(err, ErrInvalidReference) {
		t.Fatalf("err = %v", err)
	}

	p := Policy{AllowTags: []string{"registry.local:5000/*", "docker.io/library/busybox"}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{"registry.local:5000/team/app:v1", "busybox:1.36", "busybox", "nginx@" + dgst} {
		if _, err := p.Parse(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, refused := range []string{"nginx:1.27", "registry.local/app:v1", "team/busybox:1"} {
		if _, err := p.Parse(refused); !errors.Is(err, ErrNotPinned) {
			t.Errorf("%s: err = %v, want ErrNotPinned", refused, err)
		}
	}
	if _, err := AllowAllTags().Parse("anything/at:all"); err != nil {
		t.Fatal(err)
	}
	err = Policy{AllowTags: []string{"ok.local", "bad:tag:x", ""}}.Validate()
	if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "allowTags[1]") || !strings.Contains(err.Error(), "allowTags[2]") || strings.Contains(err.Error(), "allowTags[0]") {
		t.Fatalf("Validate = %v", err)
	}
}
