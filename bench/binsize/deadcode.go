package binsize

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ReflectMethodPath builds mainPkg (in moduleDir, with tags) and returns
// the call path from the program's entry to the first function through
// which any method may be called by reflection (text/template's field
// evaluation, a reflect.Value.MethodByName with a name known only at run
// time), or nil when there is none. While such a function is reachable
// the linker keeps every exported method of every type that is
// reachable, which made the agent 12 MB larger; the path says which call
// brought it in.
func ReflectMethodPath(ctx context.Context, moduleDir, tmpDir, tags, mainPkg string) ([]string, error) {
	out := filepath.Join(tmpDir, "dumpdep")
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", tags, "-ldflags=-dumpdep", "-o", out, mainPkg)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var tail bytes.Buffer
	r := io.TeeReader(stderr, &lastBytes{buf: &tail, max: 4 << 10})
	path, perr := reflectMethodPath(r)
	// The linker blocks on a full pipe: read what it still writes.
	if _, err := io.Copy(io.Discard, r); err != nil && perr == nil {
		perr = err
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("go build -ldflags=-dumpdep %s: %w\n%s", mainPkg, err, tail.String())
	}
	os.Remove(out)
	return path, perr
}

// reflectMethodPath reads the linker's -dumpdep output: one "from -> to"
// edge per line, in the order the linker marked symbols reachable, with
// <ReflectMethod> after a symbol that calls methods by reflection.
func reflectMethodPath(r io.Reader) ([]string, error) {
	parent := map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		from, to, ok := strings.Cut(sc.Text(), " -> ")
		if !ok {
			continue
		}
		from, _, _ = strings.Cut(from, " <")
		to, attr, _ := strings.Cut(to, " <")
		if _, seen := parent[to]; !seen {
			parent[to] = from
		}
		if strings.HasPrefix(attr, "ReflectMethod") {
			var path []string
			for s := to; s != "" && s != "_" && len(path) < 64; s = parent[s] {
				path = append([]string{s}, path...)
			}
			return path, nil
		}
	}
	return nil, sc.Err()
}

// lastBytes keeps the last max bytes written, for an error message.
type lastBytes struct {
	buf *bytes.Buffer
	max int
}

func (l *lastBytes) Write(p []byte) (int, error) {
	l.buf.Write(p)
	if over := l.buf.Len() - l.max; over > 0 {
		l.buf.Next(over)
	}
	return len(p), nil
}
