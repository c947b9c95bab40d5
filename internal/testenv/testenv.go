package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
)

// ContainerdSocket is where tests find containerd.
const ContainerdSocket = "/run/containerd/containerd.sock"

// InCI reports whether the CI environment variable is set: there a missing
// requirement fails the test.
func InCI() bool { return os.Getenv("CI") != "" }

// Unavailable skips the test with the reason, or fails it under CI.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("%s; CI must run this test (scripts/install-deps.sh installs what it needs)", msg)
	}
	t.Skip(msg)
}

// Integration skips the test under -short: it needs root, a daemon, a
// network namespace, a built binary or more than a few seconds. why says
// which (e.g. "starts a hub").
func Integration(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("integration test (%s); skipped with -short", why)
	}
}

// RequireRoot is Integration, then needs root; why says what for.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	Integration(t, why)
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root: %s", why)
	}
}

// RequireTool returns the path of a command, or skips the test (fails it
// under CI) with hint, e.g. "apt-get install -y gnupg".
func RequireTool(t testing.TB, name, hint string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Unavailable(t, "%s is not installed (%s): %v", name, hint, err)
	}
	return p
}

// RequireTools is RequireTool for each name, with one hint.
func RequireTools(t testing.TB, hint string, names ...string) {
	t.Helper()
	for _, n := range names {
		RequireTool(t, n, hint)
	}
}

// RequireNetNS is RequireRoot for creating network namespaces, and needs
// ip and the other commands given.
func RequireNetNS(t testing.TB, cmds ...string) {
	t.Helper()
	RequireRoot(t, "creates network namespaces")
	RequireTools(t, "scripts/install-deps.sh installs it", append([]string{"ip"}, cmds...)...)
}

// RequireContainerd is RequireRoot, then needs containerd's socket at
// ContainerdSocket to accept a connection.
func RequireContainerd(t testing.TB) {
	t.Helper()
	RequireRoot(t, "talks to containerd")
	if _, err := os.Stat(ContainerdSocket); err != nil {
		Unavailable(t, "containerd is not running (%v); start it with scripts/install-deps.sh", err)
	}
	c, err := net.DialTimeout("unix", ContainerdSocket, 5*time.Second)
	if err != nil {
		Unavailable(t, "containerd at %s does not answer (%v); start it with scripts/install-deps.sh", ContainerdSocket, err)
	}
	c.Close()
}

// RequireCNI needs the CNI bridge plugin in one of dirs.
func RequireCNI(t testing.TB, dirs []string) {
	t.Helper()
	for _, d := range dirs {
		if _, err := os.Stat(d + "/bridge"); err == nil {
			return
		}
	}
	Unavailable(t, "CNI plugins not installed in %v (apt-get install containernetworking-plugins)", dirs)
}
