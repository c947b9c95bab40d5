package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain runs main when the test binary is re-executed as the logger.
func TestMain(m *testing.M) {
	if os.Getenv("FLOTILLA_LOGGER_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func asLogger(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "FLOTILLA_LOGGER_TEST_MAIN=1")
	return cmd
}

func TestVersion(t *testing.T) {
	out, err := asLogger("version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "flotilla-logger ") {
		t.Errorf("version: %v %q", err, out)
	}
}

// TestAsTheShimRunsIt gives the logger stdout, stderr and the readiness
// pipe as fds 3, 4 and 5, as containerd's shim does.
func TestAsTheShimRunsIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c", "0.log")
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	readyR, readyW, _ := os.Pipe()
	cmd := asLogger("path", path, "max-size", "1048576")
	cmd.ExtraFiles = []*os.File{outR, errR, readyW}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outR.Close()
	errR.Close()
	readyW.Close()
	// The logger closes fd 5 when it is ready.
	if _, err := readyR.Read(make([]byte, 1)); err == nil {
		t.Fatal("the readiness pipe carried data instead of closing")
	}
	outW.WriteString("to stdout\n")
	errW.WriteString("to stderr\n")
	outW.Close()
	errW.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("logger: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.Contains(s, " stdout F to stdout\n") || !strings.Contains(s, " stderr F to stderr\n") {
		t.Errorf("log file = %q", s)
	}
}
