package image

import (
	"errors"
	"strings"
	"testing"
)

const (
	dgst = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	hex  = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

func TestParse(t *testing.T) {
	cases := []struct {
		in                        string
		domain, path, tag, digest string
		familiar                  string
	}{
		{"nginx", "docker.io", "library/nginx", "", "", "nginx"},
		{"nginx:1.25", "docker.io", "library/nginx", "1.25", "", "nginx"},
		{"nginx@" + dgst, "docker.io", "library/nginx", "", dgst, "nginx"},
		{"docker.io/nginx", "docker.io", "library/nginx", "", "", "nginx"},
		{"index.docker.io/nginx", "docker.io", "library/nginx", "", "", "nginx"},
		{"docker.io/library/nginx:1.27@" + dgst, "docker.io", "library/nginx", "1.27", dgst, "nginx"},
		{"team/app", "docker.io", "team/app", "", "", "team/app"},
		{"127.0.0.1:5000/app:v1@" + dgst, "127.0.0.1:5000", "app", "v1", dgst, "127.0.0.1:5000/app"},
		{"registry.local/team/app@" + dgst, "registry.local", "team/app", "", dgst, "registry.local/team/app"},
		{"localhost/app", "localhost", "app", "", "", "localhost/app"},
		{"localhost:5000/app", "localhost:5000", "app", "", "", "localhost:5000/app"},
		{"localhost", "docker.io", "library/localhost", "", "", "localhost"},
		{"[::1]:5000/app:v1", "[::1]:5000", "app", "v1", "", "[::1]:5000/app"},
		{"[fe80::1]/a/b", "[fe80::1]", "a/b", "", "", "[fe80::1]/a/b"},
		{"Registry.Local/a/b_c__d-e.f:v1_2", "Registry.Local", "a/b_c__d-e.f", "v1_2", "", "Registry.Local/a/b_c__d-e.f"},
		{"Foo/bar", "Foo", "bar", "", "", "Foo/bar"},
		{"reg.local:5000/app", "reg.local:5000", "app", "", "", "reg.local:5000/app"},
		{"a---b/c", "docker.io", "a---b/c", "", "", "a---b/c"},
		{"app@sha512:" + hex + hex, "docker.io", "library/app", "", "sha512:" + hex + hex, "app"},
		{"app@sha384:" + hex + hex[:32], "docker.io", "library/app", "", "sha384:" + hex + hex[:32], "app"},
		{hex + ":v1", "docker.io", "library/" + hex, "v1", "", hex},
		{"a:" + strings.Repeat("t", 128), "docker.io", "library/a", strings.Repeat("t", 128), "", "a"},
		{strings.Repeat("a", 247), "docker.io", "library/" + strings.Repeat("a", 247), "", "", strings.Repeat("a", 247)},
	}
	for _, c := range cases {
		r, err := Parse(c.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		if r.Domain != c.domain || r.Path != c.path || r.Tag != c.tag || r.Digest.String() != c.digest || r.FamiliarName() != c.familiar {
			t.Errorf("Parse(%q) = %+v (familiar %q)", c.in, r, r.FamiliarName())
		}
		again, err := Parse(r.String())
		if err != nil || again != r {
			t.Errorf("%q: String() %q does not parse back: %+v %v", c.in, r.String(), again, err)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	cases := map[string]string{
		"":                                   "must not be empty",
		"my image":                           "whitespace",
		"nginx\n":                            "whitespace",
		hex:                                  "image ID",
		"Nginx":                              "lowercase",
		"team/UPPER":                         "lowercase",
		"nginx:":                             "tag",
		"nginx:-x":                           "tag",
		"nginx:" + strings.Repeat("t", 129):  "tag",
		"a//b":                               "empty component",
		"/a":                                 "empty component",
		"a/":                                 "empty component",
		"a__-b":                              "component",
		"a..b/c":                             "registry host",
		"reg_istry.local/app":                "registry host",
		"-reg.local/app":                     "registry host",
		"reg.local:port/app":                 "port",
		"reg.local:/app":                     "port",
		"[::1/app":                           "unclosed",
		"[]:5/app":                           "IPv6",
		"[zz]:5/app":                         "IPv6",
		"app@sha256:short":                   "64 lowercase hex",
		"app@sha256:" + strings.ToUpper(hex): "64 lowercase hex",
		"app@" + hex:                         "algorithm:hex",
		"app@md5:" + hex:                     "not supported",
		"app@":                               "algorithm:hex",
		"app@@" + dgst:                       "not supported",
		strings.Repeat("a", 248):             "at most 255",
		"a:b:c":                              "component",
	}
	for in, want := range cases {
		_, err := Parse(in)
		var e *Error
		if !errors.Is(err, ErrInvalidReference) || !errors.As(err, &e) || e.Input != in {
			t.Errorf("Parse(%q) = %v, want an *Error wrapping ErrInvalidReference", in, err)
			continue
		}
		if !strings.Contains(e.Reason, want) {
			t.Errorf("Parse(%q): reason %q does not say %q", in, e.Reason, want)
		}
	}
}

func TestReferenceNames(t *testing.T) {
	r, _ := Parse("nginx")
	if r.Pinned() || r.PullName() != "docker.io/library/nginx:latest" || r.Defaulted().Tag != "latest" || r.String() != "docker.io/library/nginx" {
		t.Fatalf("%+v: pull %s, string %s", r, r.PullName(), r.String())
	}
	r, _ = Parse("registry.local/app:v1@" + dgst)
	if !r.Pinned() || r.PullName() != "registry.local/app@"+dgst || r.Defaulted() != r {
		t.Fatalf("%+v: pull %s", r, r.PullName())
	}
}
