package buildtags

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestBuildsAgree checks that every place that builds the binaries for a
// device or a release passes Tags.
func TestBuildsAgree(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, c := range []struct {
		file string
		// re finds each build's tags; every build must name Tags.
		re    *regexp.Regexp
		count int
		// use is how the builds pass them.
		use string
	}{
		{"Makefile", regexp.MustCompile(`(?m)^TAGS := (.*)$`), 1, `-tags '$(TAGS)'`},
		{"packaging/build.sh", regexp.MustCompile(`(?m)^TAGS=(.*)$`), 1, `-tags "$TAGS"`},
		// One build holds them; the others inherit it (<<: *build).
		{".goreleaser.yaml", regexp.MustCompile(`(?m)^\s+tags: \[(.*)\]$`), 1, "<<: *build"},
	} {
		b, err := os.ReadFile(filepath.Join(root, c.file))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), c.use) {
			t.Errorf("%s does not build with %s", c.file, c.use)
		}
		ms := c.re.FindAllStringSubmatch(string(b), -1)
		if len(ms) != c.count {
			t.Errorf("%s: %d tag settings (%s), want %d", c.file, len(ms), c.re, c.count)
			continue
		}
		for _, m := range ms {
			if got := strings.Join(strings.FieldsFunc(m[1], func(r rune) bool { return r == ',' || r == ' ' || r == '"' }), ","); got != Tags {
				t.Errorf("%s builds with tags %q, want %q (internal/buildtags.Tags)", c.file, got, Tags)
			}
		}
	}
}
