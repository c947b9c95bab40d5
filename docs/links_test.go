package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#+ +(.+)$`)
)

// slug is the anchor GitHub gives a heading.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestLinksStayInTheRepository: a clone documents itself. Every link of
// the README and of docs/ is relative, stays in the repository, and names
// a file (and heading) that exists.
func TestLinksStayInTheRepository(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	pages, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	pages = append(pages, filepath.Join(root, "README.md"))
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		if strings.Contains(string(b), "../shared") {
			t.Errorf("%s refers to ../shared, outside the repository", rel)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				t.Errorf("%s links outside the repository: %s", rel, target)
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			if r, err := filepath.Rel(root, path); err != nil || strings.HasPrefix(r, "..") {
				t.Errorf("%s: %s leaves the repository", rel, target)
				continue
			}
			content, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%s: %s: %v", rel, target, err)
				continue
			}
			if anchor == "" {
				continue
			}
			found := false
			for _, h := range heading.FindAllStringSubmatch(string(content), -1) {
				found = found || slug(h[1]) == anchor
			}
			if !found {
				t.Errorf("%s: %s: no heading with the anchor #%s", rel, target, anchor)
			}
		}
	}
}
