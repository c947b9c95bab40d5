package kubebuild

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Options say what to build and where to keep it.
type Options struct {
	// Version is the Kubernetes release, "v1.N.P".
	Version string
	// CacheDir keeps built binaries, one dir per release, Go version and
	// platform; $XDG_CACHE_HOME/flotilla-bench/kubernetes (or
	// ~/.cache/…) when empty.
	CacheDir string
}

// ErrVersion is a release that is not "v1.N.P".
var ErrVersion = errors.New("not a Kubernetes release version")

// Tags and the flags in Kubelet are those of Kubernetes' release build
// (hack/lib/golang.sh): stripped, paths trimmed, static.
const Tags = "selinux,notest,grpcnotrace"

// Kubelet returns the path of the kubelet of o.Version, building it when
// the cache has none. The build needs the Go module proxy (GOPROXY) or a
// module cache that holds every module it needs; it takes several
// minutes on two cores the first time.
func Kubelet(ctx context.Context, o Options) (string, error) {
	if _, err := stagingVersion(o.Version); err != nil {
		return "", err
	}
	goenv, err := goEnv(ctx)
	if err != nil {
		return "", err
	}
	if o.CacheDir == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("no cache dir for the kubelet build: %w (set Options.CacheDir)", err)
		}
		o.CacheDir = filepath.Join(dir, "flotilla-bench", "kubernetes")
	}
	bin := filepath.Join(o.CacheDir, fmt.Sprintf("%s-%s-%s_%s", o.Version, goenv["GOVERSION"], goenv["GOOS"], goenv["GOARCH"]), "kubelet")
	if st, err := os.Stat(bin); err == nil && st.Mode().IsRegular() {
		return bin, nil
	}
	tmp, err := os.MkdirTemp("", "flotilla-kubelet-build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	built, err := build(ctx, tmp, o.Version)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	// Copied beside its final name first, then renamed: a run killed
	// half-way leaves no truncated binary in the cache.
	data, err := os.ReadFile(built)
	if err != nil {
		return "", err
	}
	part := bin + ".part"
	if err := os.WriteFile(part, data, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(part, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// build makes the module in dir and builds the kubelet there.
func build(ctx context.Context, dir, version string) (string, error) {
	run := func(what string, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		// GOTOOLCHAIN=local: a release that needs a newer Go says so
		// instead of downloading a toolchain.
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local", "CGO_ENABLED=0")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("building kubelet %s: %s: go %s: %w: %s", version, what, strings.Join(args, " "), err, tail(stderr.String(), 6))
		}
		return stdout.Bytes(), nil
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module kubelet-build\n"), 0o644); err != nil {
		return "", err
	}
	out, err := run("fetching k8s.io/kubernetes", "mod", "download", "-json", "k8s.io/kubernetes@"+version)
	if err != nil {
		return "", err
	}
	var dl struct{ GoMod, Error string }
	if err := json.Unmarshal(out, &dl); err != nil {
		return "", fmt.Errorf("building kubelet %s: go mod download: %w", version, err)
	}
	if dl.Error != "" || dl.GoMod == "" {
		return "", fmt.Errorf("building kubelet %s: go mod download k8s.io/kubernetes@%s: %s", version, version, dl.Error)
	}
	if out, err = run("reading k8s.io/kubernetes's go.mod", "mod", "edit", "-json", dl.GoMod); err != nil {
		return "", err
	}
	mod, err := Module(out, version)
	if err != nil {
		return "", fmt.Errorf("building kubelet %s: %w", version, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), mod, 0o644); err != nil {
		return "", err
	}
	tools := "//go:build tools\n\npackage tools\n\nimport _ \"k8s.io/kubernetes/cmd/kubelet\"\n"
	if err := os.WriteFile(filepath.Join(dir, "tools.go"), []byte(tools), 0o644); err != nil {
		return "", err
	}
	if _, err := run("resolving its modules", "mod", "tidy"); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "kubelet")
	if _, err := run("compiling", "build", "-trimpath", "-tags", Tags, "-ldflags", ldflags(version), "-o", bin, "k8s.io/kubernetes/cmd/kubelet"); err != nil {
		return "", err
	}
	return bin, nil
}

// ldflags strip the binary and stamp the version, as the release does.
func ldflags(version string) string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	flags := []string{"-s", "-w"}
	for _, pkg := range []string{"k8s.io/client-go/pkg/version", "k8s.io/component-base/version"} {
		for k, v := range map[string]string{"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"} {
			flags = append(flags, fmt.Sprintf("-X=%s.%s=%s", pkg, k, v))
		}
	}
	return strings.Join(flags, " ")
}

// goMod is what `go mod edit -json` prints of a go.mod.
type goMod struct {
	Go      string
	GoDebug []struct{ Key, Value string }
	Replace []struct {
		Old struct{ Path string }
		New struct{ Path, Version string }
	}
}

// Module is the go.mod of a module that builds Kubernetes' commands at
// version: k8s.io/kubernetes required, and each module its go.mod
// replaces with a directory under staging/ replaced by that module's
// release (v0.N.P). kubernetesMod is k8s.io/kubernetes's go.mod as `go
// mod edit -json` prints it; its go and godebug lines are kept, so the
// binary gets the defaults Kubernetes builds it with.
func Module(kubernetesMod []byte, version string) ([]byte, error) {
	staging, err := stagingVersion(version)
	if err != nil {
		return nil, err
	}
	var m goMod
	if err := json.Unmarshal(kubernetesMod, &m); err != nil {
		return nil, fmt.Errorf("k8s.io/kubernetes's go.mod: %w", err)
	}
	var b strings.Builder
	b.WriteString("module kubelet-build\n\n")
	if m.Go != "" {
		fmt.Fprintf(&b, "go %s\n\n", m.Go)
	}
	for _, d := range m.GoDebug {
		fmt.Fprintf(&b, "godebug %s=%s\n", d.Key, d.Value)
	}
	fmt.Fprintf(&b, "\nrequire k8s.io/kubernetes %s\n\n", version)
	n := 0
	for _, r := range m.Replace {
		if r.New.Version != "" || !strings.HasPrefix(r.New.Path, "./staging/") {
			continue
		}
		fmt.Fprintf(&b, "replace %s => %s %s\n", r.Old.Path, r.Old.Path, staging)
		n++
	}
	if n == 0 {
		return nil, errors.New("k8s.io/kubernetes's go.mod replaces no module with a staging directory: not a Kubernetes release's go.mod")
	}
	return []byte(b.String()), nil
}

// stagingVersion is the staging modules' release of a Kubernetes release:
// v0.N.P for v1.N.P.
func stagingVersion(version string) (string, error) {
	rest, ok := strings.CutPrefix(version, "v1.")
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 2 || parts[0] == "" || parts[1] == "" || strings.Trim(rest, "0123456789.") != "" {
		return "", fmt.Errorf("%w: %q (want v1.N.P, e.g. v1.37.2)", ErrVersion, version)
	}
	return "v0." + rest, nil
}

func goEnv(ctx context.Context) (map[string]string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "-json", "GOVERSION", "GOOS", "GOARCH").Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w (the kubelet is built with the Go toolchain in PATH)", err)
	}
	env := map[string]string{}
	if err := json.Unmarshal(out, &env); err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	return env, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
