package testimage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// AppPackage is the Go package of the test HTTP program.
const AppPackage = "flotilla.dev/flotilla/test/testapp"

// Options shape the image Build produces. The zero value gives an image
// whose entrypoint is the binary and nothing else.
type Options struct {
	// Env is the image's environment ("K=V"); PATH is added when missing.
	Env []string
	// Entrypoint defaults to the binary, Cmd to nothing.
	Entrypoint []string
	Cmd        []string
	// ExposedPorts like "8080/tcp".
	ExposedPorts []string
	WorkingDir   string
	User         string
	StopSignal   string
	Labels       map[string]string
	// Arch is the GOARCH and image architecture; defaults to the host's.
	Arch string
	// BinaryPath is where the binary lands in the image; "/<name>" when empty.
	BinaryPath string
	// Files adds regular files (absolute path in the image → content).
	Files map[string]string
	// Tag is pushed beside the digest; "latest" when empty.
	Tag string
}

// App returns the digest-pinned reference of the test app image (see
// test/testapp) in the shared registry: entrypoint /testapp, port 8080.
func App(t testing.TB) string {
	t.Helper()
	return Build(t, SharedRegistry(t), "testapp", AppPackage, Options{ExposedPorts: []string{"8080/tcp"}})
}

// Build compiles source (a Go import path, or a directory of a main package
// given as an absolute or ./relative path) into a static binary, packs it
// into a one-layer OCI image under name, pushes it to reg and returns
// "HOST/name@sha256:...". Results are cached per process.
func Build(t testing.TB, reg *Registry, name, source string, opts Options) string {
	t.Helper()
	img, err := BuildImage(reg, name, source, opts)
	if err != nil {
		t.Fatalf("testimage: %v", err)
	}
	return img.Ref
}

// Image describes a pushed image.
type Image struct {
	Ref    string // HOST/name@sha256:...
	Tagged string // HOST/name:tag
	Digest string // sha256:... of the manifest
	Config []byte // the image config JSON
}

type result struct {
	done chan struct{}
	img  Image
	err  error
}

var (
	cacheMu  sync.Mutex
	binaries = map[string]*binResult{}
	built    = map[string]*result{}
)

type binResult struct {
	done chan struct{}
	bin  []byte
	err  error
}

// BuildImage is Build without a testing.TB, for benchmarks' drivers and
// helpers that set up images outside a test function.
func BuildImage(reg *Registry, name, source string, opts Options) (Image, error) {
	if opts.Arch == "" {
		opts.Arch = runtime.GOARCH
	}
	if opts.Tag == "" {
		opts.Tag = "latest"
	}
	if opts.BinaryPath == "" {
		opts.BinaryPath = "/" + path.Base(name)
	}
	optKey, _ := json.Marshal(opts)
	key := reg.Host + "|" + name + "|" + source + "|" + string(optKey)
	cacheMu.Lock()
	r, ok := built[key]
	if !ok {
		r = &result{done: make(chan struct{})}
		built[key] = r
	}
	cacheMu.Unlock()
	if ok {
		<-r.done
		return r.img, r.err
	}
	defer close(r.done)
	bin, err := compile(source, opts.Arch)
	if err != nil {
		r.err = err
		return Image{}, err
	}
	r.img, r.err = pack(bin, opts).push(reg, name, opts.Tag)
	return r.img, r.err
}

func compile(source, arch string) ([]byte, error) {
	key := source + "|" + arch
	cacheMu.Lock()
	b, ok := binaries[key]
	if !ok {
		b = &binResult{done: make(chan struct{})}
		binaries[key] = b
	}
	cacheMu.Unlock()
	if ok {
		<-b.done
		return b.bin, b.err
	}
	defer close(b.done)
	b.bin, b.err = goBuild(source, arch)
	return b.bin, b.err
}

// goBuild runs go build; the binary is read into memory and its temp dir
// removed, so builds leave no files behind.
func goBuild(source, arch string) ([]byte, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	tmp, err := os.MkdirTemp("", "flotilla-testimage-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "bin")
	args := []string{"build", "-trimpath", "-ldflags=-s -w", "-o", out}
	cmd := exec.Command(goBin)
	if strings.HasPrefix(source, "/") || strings.HasPrefix(source, ".") {
		dir, err := filepath.Abs(source)
		if err != nil {
			return nil, err
		}
		cmd.Dir = dir
		if inModule(dir) {
			args = append(args, ".")
		} else {
			// A loose main package outside any module: name its files.
			files, err := filepath.Glob(filepath.Join(dir, "*.go"))
			if err != nil || len(files) == 0 {
				return nil, fmt.Errorf("build %s: no Go files in the directory", source)
			}
			for _, f := range files {
				if !strings.HasSuffix(f, "_test.go") {
					args = append(args, filepath.Base(f))
				}
			}
		}
	} else {
		args = append(args, source)
	}
	cmd.Args = append([]string{goBin}, args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build %s for %s: %w: %s", source, arch, err, stderr.String())
	}
	return os.ReadFile(out)
}

func inModule(dir string) bool {
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return false
		}
		dir = parent
	}
}
