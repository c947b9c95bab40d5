package loader

import (
	"bufio"
	"bytes"
	"io/fs"
	"path"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
)

// ignored says whether p is excluded by the .flotillaignore files of the
// repository root and of every directory above p, with git's precedence:
// deeper files and later lines win.
func (l *load) ignored(p string, isDir bool) bool {
	parts := splitPath(p)
	var ps []gitignore.Pattern
	for i := 0; i < len(parts); i++ {
		ps = append(ps, l.patterns(parts[:i])...)
	}
	if len(ps) == 0 {
		return false
	}
	return gitignore.NewMatcher(ps).Match(parts, isDir)
}

func splitPath(p string) []string {
	p = path.Clean(p)
	if p == "." || p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// patterns reads the ignore file of one directory once.
func (l *load) patterns(dir []string) []gitignore.Pattern {
	key := strings.Join(dir, "/")
	if ps, ok := l.ignores[key]; ok {
		return ps
	}
	file := path.Join(".", key, IgnoreFile)
	data, err := fs.ReadFile(l.fsys, file)
	var ps []gitignore.Pattern
	if err == nil {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 0, 4096), 64<<10)
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), "\r")
			if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
				continue
			}
			ps = append(ps, gitignore.ParsePattern(line, dir))
		}
	}
	l.ignores[key] = ps
	return ps
}
