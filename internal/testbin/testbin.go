// Package testbin finds or builds the project's binaries for tests that run
// them as a user would: $FLOTILLA_BIN/<name> when the Makefile built them,
// otherwise a fresh `go build` into the test's temp dir. Kubectl does the
// same for the kubectl the kubectl tests run. A test that runs a binary is
// an integration test: each of these skips it with -short (testenv).
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"flotilla.dev/flotilla/internal/buildtags"
	"flotilla.dev/flotilla/internal/testenv"
)

var (
	mu    sync.Mutex
	built = map[string]string{}
)

// Path returns the path of binary name (flotilla-hub, flotilla-agent,
// flotctl), building it once per test process when needed.
func Path(t testing.TB, name string) string {
	t.Helper()
	testenv.Integration(t, "runs "+name)
	if dir := os.Getenv("FLOTILLA_BIN"); dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if p, ok := built[name]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "flotilla-bin-")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-tags", buildtags.Tags, "-o", out, "./cmd/"+name)
	cmd.Dir = moduleRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", name, err, b)
	}
	built[name] = out
	return out
}

func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var (
	dirOnce sync.Once
	dirPath string
	dirErr  error
)

// Dir returns a directory holding every command of the project
// (flotilla-hub, flotilla-agent, flotilla-logger, flotctl): $FLOTILLA_BIN
// when the Makefile built them, otherwise one `go build ./cmd/...` per
// test process.
func Dir(t testing.TB) string {
	t.Helper()
	testenv.Integration(t, "runs the project's binaries")
	if dir := os.Getenv("FLOTILLA_BIN"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "flotilla-agent")); err == nil {
			return dir
		}
	}
	dirOnce.Do(func() {
		dirPath, dirErr = os.MkdirTemp("", "flotilla-bin-")
		if dirErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-tags", buildtags.Tags, "-o", dirPath+"/", "./cmd/...")
		cmd.Dir = moduleRoot()
		if b, err := cmd.CombinedOutput(); err != nil {
			dirErr = fmt.Errorf("building the commands: %v\n%s", err, b)
		}
	})
	if dirErr != nil {
		t.Fatal(dirErr)
	}
	return dirPath
}

// ModuleRoot is the repository's top directory.
func ModuleRoot() string { return moduleRoot() }

var (
	kubectlOnce sync.Once
	kubectlPath string
	kubectlErr  error
)

// Kubectl returns the path of the kubectl the kubectl tests run:
// $FLOTILLA_KUBECTL when set (`make test` builds it once per run), otherwise
// ./test/kubectl built once per test process. That is k8s.io/kubectl at the
// version go.mod pins, the Kubernetes minor of the client-go the hub is
// written against. A kubectl in PATH is never used, on purpose: whatever
// version the machine happens to have (Debian's is 1.20, too old for the
// tests, or none) must not decide whether the tests pass, fail or run.
//
// Each test process links it afresh (a few seconds once the build cache
// is warm; two minutes on a cold one) into the user's cache directory
// (~/.cache/flotilla/test-kubectl/kubectl-VERSION), replacing the file
// atomically, so repeated runs do not leave an 80 MB binary behind each.
func Kubectl(t testing.TB) string {
	t.Helper()
	testenv.Integration(t, "runs kubectl")
	if p := os.Getenv("FLOTILLA_KUBECTL"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("FLOTILLA_KUBECTL: %v", err)
		}
		return p
	}
	kubectlOnce.Do(func() { kubectlPath, kubectlErr = buildKubectl() })
	if kubectlErr != nil {
		t.Fatal(kubectlErr)
	}
	return kubectlPath
}

// kubectlLDFlags are the linker flags that make `kubectl version` report
// the Kubernetes version of modVersion, the k8s.io/kubectl module's version
// (v0.37.2 is Kubernetes v1.37.2), as a released kubectl does. The
// Makefile's test-kubectl target links with the same flags.
func kubectlLDFlags(modVersion string) (string, error) {
	rest, ok := strings.CutPrefix(modVersion, "v0.")
	minor, _, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || minor == "" {
		return "", fmt.Errorf("k8s.io/kubectl version %q is not v0.MINOR.PATCH", modVersion)
	}
	const pkg = "k8s.io/component-base/version"
	return fmt.Sprintf("-s -w -X %s.gitVersion=v1.%s -X %s.gitMajor=1 -X %s.gitMinor=%s", pkg, rest, pkg, pkg, minor), nil
}

func buildKubectl() (string, error) {
	root := moduleRoot()
	v, err := exec.Command("go", "-C", root, "list", "-m", "-f", "{{.Version}}", "k8s.io/kubectl").Output()
	if err != nil {
		return "", fmt.Errorf("finding the k8s.io/kubectl version in go.mod: %v", err)
	}
	version := strings.TrimSpace(string(v))
	ldflags, err := kubectlLDFlags(version)
	if err != nil {
		return "", err
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		if dir, err = os.MkdirTemp("", "flotilla-bin-"); err != nil {
			return "", err
		}
	}
	dir = filepath.Join(dir, "flotilla", "test-kubectl")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Test processes of several packages may build at once: each links
	// into its own directory and renames the result into place.
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", tmp+"/kubectl", "./test/kubectl")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building kubectl %s (./test/kubectl): %v\n%s", version, err, b)
	}
	out := filepath.Join(dir, "kubectl-"+version)
	if err := os.Rename(tmp+"/kubectl", out); err != nil {
		return "", err
	}
	return out, nil
}
