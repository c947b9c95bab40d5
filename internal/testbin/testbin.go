// Package testbin finds or builds the project's binaries for tests that run
// them as a user would: $FLOTILLA_BIN/<name> when the Makefile built them,
// otherwise a fresh `go build` into the test's temp dir.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	built = map[string]string{}
)

// Path returns the path of binary name (flotilla-hub, flotilla-agent,
// flotctl), building it once per test process when needed.
func Path(t testing.TB, name string) string {
	t.Helper()
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
	cmd := exec.Command("go", "build", "-o", out, "./cmd/"+name)
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
		cmd := exec.Command("go", "build", "-o", dirPath+"/", "./cmd/...")
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
