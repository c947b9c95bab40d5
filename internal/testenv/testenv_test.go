package testenv

import (
	"os"
	"os/exec"
	"testing"
)

func TestRequireToolFindsSh(t *testing.T) {
	if p := RequireTool(t, "sh", "it is everywhere"); p == "" {
		t.Fatal("no path for sh")
	}
}

func TestUnavailableSkipsOutsideCI(t *testing.T) {
	if InCI() {
		t.Skip("CI is set: Unavailable would fail")
	}
	ran := false
	t.Run("missing", func(t *testing.T) {
		defer func() { ran = true }()
		RequireTool(t, "flotilla-no-such-tool", "none")
		t.Error("RequireTool returned for a missing tool")
	})
	if !ran {
		t.Fatal("subtest did not run")
	}
}

func TestUnavailableFailsUnderCI(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") != "" {
		RequireTool(t, "flotilla-no-such-tool", "none")
		return
	}
	Integration(t, "re-runs the test binary")
	cmd := exec.Command(os.Args[0], "-test.run=^TestUnavailableFailsUnderCI$")
	cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", "CI=true")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("under CI a missing tool passed:\n%s", out)
	}
}
