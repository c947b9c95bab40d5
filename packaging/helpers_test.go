package packaging

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"flotilla.dev/flotilla/internal/buildtags"
	"flotilla.dev/flotilla/internal/testbin"
	"flotilla.dev/flotilla/internal/testenv"
)

// root is the repository's top directory.
var root = testbin.ModuleRoot()

// scratch holds what the tests build (binaries, packages); removed when
// the test process ends.
var scratch string

func TestMain(m *testing.M) {
	code := func() int {
		var err error
		if scratch, err = os.MkdirTemp("", "flotilla-packaging-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(scratch)
		// The tests install packages into this machine: one test process
		// at a time (two engineers, or two `make test`s, on one machine).
		if os.Geteuid() == 0 {
			if f, err := os.OpenFile("/run/lock/flotilla-packaging-test.lock", os.O_CREATE|os.O_RDWR, 0o600); err == nil {
				defer f.Close()
				if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
					fmt.Fprintln(os.Stderr, "locking:", err)
					return 1
				}
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// unavailable skips the test, or fails it in CI: testenv.Unavailable.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	testenv.Unavailable(t, format, args...)
}

// requireTools checks that every tool is in PATH. The tests that need them
// build packages: integration tests, skipped with -short.
func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	testenv.Integration(t, "builds packages")
	testenv.RequireTools(t, "scripts/install-deps.sh installs it", tools...)
}

func requireRoot(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "installs packages")
}

// run runs a command and returns its combined output, failing the test
// when it fails.
func run(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	out, err := try(env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func try(env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// Versions of the packages the tests build: v1 is installed first, v2
// upgrades it.
const (
	v1Version = "0.0.1"
	v2Version = "0.0.2"
	// v2Binary is what the v2 agent's `version` says.
	v2Binary = "v0.0.2-pkgtest"
)

// pkgs are the amd64 packages of one version: .deb and .rpm of
// flotilla-agent and flotilla-hub, by "<name>.<format>".
type pkgs map[string]string

var (
	amd64Once sync.Once
	amd64Bin  string
	amd64Err  error

	v1Once sync.Once
	v1Pkgs pkgs
	v1Err  error

	v2Once sync.Once
	v2Pkgs pkgs
	v2Err  error
)

// amd64Binaries is a directory of static, stripped amd64 binaries:
// $FLOTILLA_BIN when `make` built them so, else built here as build.sh
// builds them.
func amd64Binaries(t *testing.T) string {
	t.Helper()
	amd64Once.Do(func() {
		if dir := os.Getenv("FLOTILLA_BIN"); dir != "" && shippable(dir) {
			amd64Bin = dir
			return
		}
		amd64Bin = filepath.Join(scratch, "bin-amd64")
		amd64Err = goBuild(amd64Bin, "amd64", "", "v0.0.1-pkgtest", "./cmd/...")
	})
	if amd64Err != nil {
		t.Fatal(amd64Err)
	}
	return amd64Bin
}

// shippable is true when dir holds the four commands as build.sh makes
// them: statically linked (no interpreter) and stripped (no symbol table).
func shippable(dir string) bool {
	for _, name := range []string{"flotilla-agent", "flotilla-logger", "flotilla-hub", "flotctl"} {
		f, err := elf.Open(filepath.Join(dir, name))
		if err != nil {
			return false
		}
		static := true
		for _, p := range f.Progs {
			static = static && p.Type != elf.PT_INTERP
		}
		stripped := f.Section(".symtab") == nil
		f.Close()
		if !static || !stripped {
			return false
		}
	}
	return true
}

// goBuild builds packages for linux/goarch as build.sh and .goreleaser.yaml
// do (CGO off, -trimpath, the build tags, stripped, the version linked in).
func goBuild(out, goarch, goarm, version string, packages ...string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	ldflags := "-s -w -X flotilla.dev/flotilla/internal/version.Version=" + version + " -X flotilla.dev/flotilla/internal/version.Commit=pkgtest"
	args := append([]string{"build", "-trimpath", "-tags", buildtags.Tags, "-ldflags", ldflags, "-o", out + "/"}, packages...)
	start := time.Now()
	b, err := try([]string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + goarch, "GOARM=" + goarm}, "go", args...)
	if err != nil {
		return fmt.Errorf("go build for %s: %w\n%s", goarch, err, b)
	}
	fmt.Printf("packaging: built %s for linux/%s%s in %s\n", strings.Join(packages, " "), goarch, goarm, time.Since(start).Round(time.Second))
	return nil
}

// packages builds amd64 packages of a version with build.sh from the
// binaries in bin: both packages in both formats, or only the agent's
// .deb.
func packages(bin, version, out string, agentDebOnly bool) (pkgs, error) {
	start := time.Now()
	args := []string{"packaging/build.sh", "-o", out, "-b", bin}
	names, formats := []string{"flotilla-agent", "flotilla-hub"}, []string{"deb", "rpm"}
	if agentDebOnly {
		args = append(args, "-n", "flotilla-agent", "-f", "deb")
		names, formats = names[:1], formats[:1]
	}
	b, err := try([]string{"PKG_VERSION=" + version}, "bash", append(args, "amd64")...)
	if err != nil {
		return nil, fmt.Errorf("packaging/build.sh: %w\n%s", err, b)
	}
	fmt.Printf("packaging: built the %s packages in %s\n", version, time.Since(start).Round(time.Second))
	p := pkgs{}
	for _, name := range names {
		for _, format := range formats {
			file := fmt.Sprintf("%s_%s-1_amd64.deb", name, version)
			if format == "rpm" {
				file = fmt.Sprintf("%s-%s-1.x86_64.rpm", name, version)
			}
			path := filepath.Join(out, file)
			if _, err := os.Stat(path); err != nil {
				return nil, fmt.Errorf("build.sh made no %s: %w\n%s", file, err, b)
			}
			p[name+"."+format] = path
		}
	}
	return p, nil
}

// v1 is the first version's packages.
func v1(t *testing.T) pkgs {
	t.Helper()
	bin := amd64Binaries(t)
	v1Once.Do(func() { v1Pkgs, v1Err = packages(bin, v1Version, filepath.Join(scratch, "v1"), false) })
	if v1Err != nil {
		t.Fatal(v1Err)
	}
	return v1Pkgs
}

// v2 is the next version's agent .deb, whose agent is relinked to say
// v2Binary (only the link runs again: the compiled packages are cached).
func v2(t *testing.T) pkgs {
	t.Helper()
	bin := amd64Binaries(t)
	v2Once.Do(func() {
		dir := filepath.Join(scratch, "bin-amd64-v2")
		if v2Err = goBuild(dir, "amd64", "", v2Binary, "./cmd/flotilla-agent"); v2Err != nil {
			return
		}
		for _, name := range []string{"flotilla-logger", "flotilla-hub", "flotctl"} {
			if v2Err = copyFile(filepath.Join(bin, name), filepath.Join(dir, name)); v2Err != nil {
				return
			}
		}
		v2Pkgs, v2Err = packages(dir, v2Version, filepath.Join(scratch, "v2"), true)
	})
	if v2Err != nil {
		t.Fatal(v2Err)
	}
	return v2Pkgs
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}
