package image

import (
	_ "crypto/sha512" // distribution/reference accepts sha384 and sha512 digests only when linked
	"strings"
	"testing"

	"github.com/distribution/reference"
)

// FuzzParse checks the parser against github.com/distribution/reference,
// the grammar Docker, containerd and Kubernetes use: both accept the same
// strings and normalise them the same way. The one deliberate difference:
// a first component that looks like a host but is not a valid one
// ("reg_istry.local/app") is refused here, where distribution reads it as
// a path with an empty host. Every accepted reference round-trips through
// String, and Policy.Check never refuses a sha256-pinned reference.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"nginx", "a/b:c", "h:5000/x@" + dgst, "::", "@", "", "Foo/bar", "[::1]:5000/app:v1",
		"index.docker.io/x", "docker.io/library/y:1@" + dgst, "reg_istry.local/app", "a__b/c--d", hex,
		"localhost", "app@sha512:" + hex + hex, "a.b:1/c:d", "x:" + strings.Repeat("t", 129),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		theirs, terr := reference.ParseNormalizedNamed(s)
		switch {
		case err == nil && terr != nil:
			t.Fatalf("%q: accepted as %+v, distribution refuses: %v", s, r, terr)
		case err != nil && terr == nil && reference.Domain(theirs) != "":
			t.Fatalf("%q: refused (%v), distribution accepts %q", s, err, theirs)
		case err != nil:
			return
		}
		want := Reference{Domain: reference.Domain(theirs), Path: reference.Path(theirs)}
		if tg, ok := theirs.(reference.Tagged); ok {
			want.Tag = tg.Tag()
		}
		if d, ok := theirs.(reference.Digested); ok {
			want.Digest = d.Digest()
		}
		if r != want {
			t.Fatalf("%q: %+v, distribution %+v", s, r, want)
		}
		again, err := Parse(r.String())
		if err != nil || again != r {
			t.Fatalf("%q -> %q does not round-trip: %+v, %v", s, r.String(), again, err)
		}
		if r.PinnedSHA256() && (Policy{}).Check(r) != nil {
			t.Fatalf("%q: pinned but refused by the policy", s)
		}
	})
}

// FuzzPattern: patterns never panic, and a valid pattern matches the
// repository it was written as when it has no "*".
func FuzzPattern(f *testing.F) {
	for _, s := range []string{"*", "busybox", "registry.local:5000/*", "a/*/b", "docker.io", "[::1]:5"} {
		f.Add(s, "busybox")
	}
	f.Fuzz(func(t *testing.T, pat, ref string) {
		p, err := ParsePattern(pat)
		if err != nil {
			return
		}
		if r, err := Parse(ref); err == nil {
			p.Match(r)
		}
		if !strings.Contains(pat, "*") && strings.Contains(pat, "/") {
			r, err := Parse(pat)
			if err != nil || !p.Match(r) {
				t.Fatalf("pattern %q does not match itself: %v", pat, err)
			}
		}
	})
}
