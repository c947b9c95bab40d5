package binsize

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"flotilla.dev/flotilla/internal/buildtags"
)

// Package is the code and read-only data of one package (or group).
type Package struct {
	Path  string
	Bytes int64
}

// Sizes maps package paths to their text and read-only data bytes, from
// `go tool nm -size` of an unstripped binary. Bytes the runtime's tables
// hold for every package (pclntab, type links) are not attributed.
func Sizes(ctx context.Context, bin string) (map[string]int64, error) {
	cmd := exec.CommandContext(ctx, "go", "tool", "nm", "-size", bin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("go tool nm: %w", err)
	}
	sizes, perr := parseNM(out)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("go tool nm %s: %w: %s", bin, err, stderr.String())
	}
	if perr != nil {
		return nil, perr
	}
	if len(sizes) == 0 {
		return nil, fmt.Errorf("%s has no symbols (stripped?): build it without -s to measure", bin)
	}
	return sizes, nil
}

func parseNM(r io.Reader) (map[string]int64, error) {
	sizes := map[string]int64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		// "  4779e00   33554432 D crypto/internal/fips140/drbg.memory"
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			continue
		}
		switch f[2] {
		case "T", "t", "R", "r":
		default:
			continue // data and bss: not what the file's pages hold for code
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("go tool nm line %q: %w", sc.Text(), err)
		}
		if pkg := SymbolPackage(strings.Join(f[3:], " ")); pkg != "" {
			sizes[pkg] += n
		}
	}
	return sizes, sc.Err()
}

// SymbolPackage returns the import path of the package a Go symbol
// belongs to, or "" for the runtime's own tables ("go:func.*").
func SymbolPackage(sym string) string {
	if itab, ok := strings.CutPrefix(sym, "go:itab."); ok {
		// "go:itab.T,I": the concrete type's package owns it.
		sym, _, _ = strings.Cut(itab, ",")
	}
	for _, p := range []string{"type:", "go:info.", "*"} {
		sym = strings.TrimPrefix(sym, p)
	}
	if strings.HasPrefix(sym, "go:") || sym == "" {
		return ""
	}
	// The package path ends at the first '.' after its last '/', looking
	// only before any receiver, instantiation or closure suffix.
	end := len(sym)
	if i := strings.IndexAny(sym, "([{"); i >= 0 {
		end = i
	}
	slash := strings.LastIndex(sym[:end], "/")
	dot := strings.Index(sym[slash+1:], ".")
	if dot < 0 {
		return ""
	}
	return sym[:slash+1+dot]
}

// Group adds sizes up by module-like prefix: the standard library is
// "std"; "github.com/a/b/c" is "github.com/a/b"; "k8s.io/x/y" is
// "k8s.io/x"; the main module's packages keep their own path under
// mainModule (one level below it).
func Group(sizes map[string]int64, mainModule string) []Package {
	groups := map[string]int64{}
	for pkg, n := range sizes {
		groups[groupOf(pkg, mainModule)] += n
	}
	return sorted(groups)
}

func groupOf(pkg, mainModule string) string {
	if mainModule != "" && (pkg == mainModule || strings.HasPrefix(pkg, mainModule+"/")) {
		parts := strings.Split(strings.TrimPrefix(pkg, mainModule+"/"), "/")
		return mainModule + "/" + parts[0]
	}
	first, _, _ := strings.Cut(pkg, "/")
	if !strings.Contains(first, ".") {
		return "std"
	}
	parts := strings.Split(pkg, "/")
	n := 2
	switch first {
	case "github.com", "gitlab.com", "go.etcd.io", "golang.org", "go.opentelemetry.io", "cloud.google.com":
		n = 3
	}
	if parts[0] == "vendor" || len(parts) < n {
		return pkg
	}
	return strings.Join(parts[:n], "/")
}

func sorted(m map[string]int64) []Package {
	out := make([]Package, 0, len(m))
	for p, n := range m {
		out = append(out, Package{Path: p, Bytes: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bytes != out[j].Bytes {
			return out[i].Bytes > out[j].Bytes
		}
		return out[i].Path < out[j].Path
	})
	return out
}

// OnlyThrough returns the packages of mainPkg's build that are imported
// only through via (via included): what the binary would not link
// without via, built with the release's tags. dir is the module
// directory go list runs in.
func OnlyThrough(ctx context.Context, dir, mainPkg, via string) (map[string]bool, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-tags", buildtags.Tags, "-json=ImportPath,Imports", mainPkg)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("go list %s: %w: %s", mainPkg, err, ee.Stderr)
		}
		return nil, fmt.Errorf("go list %s: %w", mainPkg, err)
	}
	imports := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		imports[p.ImportPath] = p.Imports
	}
	if _, ok := imports[via]; !ok {
		return nil, fmt.Errorf("%s does not import %s", mainPkg, via)
	}
	reach := func(skip string) map[string]bool {
		seen := map[string]bool{}
		stack := []string{mainPkg}
		for len(stack) > 0 {
			p := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if p == skip || seen[p] {
				continue
			}
			seen[p] = true
			stack = append(stack, imports[p]...)
		}
		return seen
	}
	all, without := reach(""), reach(via)
	only := map[string]bool{}
	for p := range all {
		if !without[p] {
			only[p] = true
		}
	}
	return only, nil
}

// Sum adds up the sizes of the packages in set.
func Sum(sizes map[string]int64, set map[string]bool) (total int64, pkgs []Package) {
	m := map[string]int64{}
	for p, n := range sizes {
		if set[p] {
			total += n
			m[p] = n
		}
	}
	return total, sorted(m)
}

// LinkCost builds two programs in moduleDir's module, stripped and
// tagged as releases are, and returns both sizes: what adding a
// dependency costs a binary's file, measured on programs that differ
// only in using it.
func LinkCost(ctx context.Context, moduleDir, tmpDir, without, with string) (before, after int64, err error) {
	build := func(name, src string) (int64, error) {
		file := filepath.Join(tmpDir, name+".go")
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			return 0, err
		}
		out := filepath.Join(tmpDir, name)
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", buildtags.Tags, "-ldflags=-s -w", "-o", out, file)
		cmd.Dir = moduleDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("build %s: %w\n%s", name, err, b)
		}
		st, err := os.Stat(out)
		if err != nil {
			return 0, err
		}
		return st.Size(), nil
	}
	if before, err = build("without", without); err != nil {
		return 0, 0, err
	}
	after, err = build("with", with)
	return before, after, err
}
