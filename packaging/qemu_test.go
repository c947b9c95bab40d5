package packaging

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestArmAgentsRunUnderQEMU builds the agent and its log driver for arm64
// and armv7 as the packages ship them and runs them under qemu-user-static:
// `version`, and `config check` of the packaged agent.yaml (which reads it
// with the same YAML and flag code as `run`).
func TestArmAgentsRunUnderQEMU(t *testing.T) {
	for _, a := range []struct {
		arch, goarch, goarm, qemu string
		machine                   elf.Machine
	}{
		{"arm64", "arm64", "", "qemu-aarch64-static", elf.EM_AARCH64},
		{"arm7", "arm", "7", "qemu-arm-static", elf.EM_ARM},
	} {
		t.Run(a.arch, func(t *testing.T) {
			requireTools(t, a.qemu)
			dir := filepath.Join(scratch, "bin-"+a.arch)
			if err := goBuild(dir, a.goarch, a.goarm, "v0.0.1-pkgtest", "./cmd/flotilla-agent", "./cmd/flotilla-logger"); err != nil {
				t.Fatal(err)
			}
			for _, bin := range []string{"flotilla-agent", "flotilla-logger"} {
				path := filepath.Join(dir, bin)
				f, err := elf.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				if f.Machine != a.machine {
					t.Errorf("%s is for %s, want %s", bin, f.Machine, a.machine)
				}
				f.Close()
				st, _ := os.Stat(path)
				t.Logf("%s for %s: %.1f MiB", bin, a.arch, float64(st.Size())/(1<<20))
				out := run(t, nil, a.qemu, path, "version")
				if !strings.HasPrefix(out, bin+" v0.0.1-pkgtest ") || !strings.Contains(out, "linux/"+a.goarch) {
					t.Errorf("%s %s version: %q", a.qemu, bin, out)
				}
			}
			conf := filepath.Join(root, "packaging/agent/agent.yaml")
			if out := run(t, nil, a.qemu, filepath.Join(dir, "flotilla-agent"), "config", "check", "--config", conf); strings.TrimSpace(out) != conf+": ok" {
				t.Errorf("config check under %s: %q", a.qemu, out)
			}
		})
	}
}

// qemuPackages are the agent's packages whose unit tests run on arm64:
// the device's local store (bbolt), static pods, the kubelet's state
// machine (on its fakes), envvars, status, probes and volumes, and the
// power-cut-safe writes.
var qemuPackages = []string{
	"./agent/localstore", "./agent/static", "./agent/kubelet", "./agent/kubelet/envvars",
	"./agent/kubelet/status", "./agent/kubelet/probes", "./agent/kubelet/volumes", "./internal/atomicfile",
}

// TestAgentUnitTestsUnderQEMU compiles the agent's unit tests for arm64
// and runs them under qemu-aarch64-static as the unprivileged user nobody.
// Unprivileged, every test that needs root (containerd, namespaces,
// mounts) skips itself, as in a `go test` by a normal user, and the
// kubelet's TestMain builds no log driver: what runs is exactly the unit
// tests that need no root. (As root they would drive this machine's
// containerd with arm64 binaries.)
func TestAgentUnitTestsUnderQEMU(t *testing.T) {
	requireTools(t, "qemu-aarch64-static")
	requireRoot(t) // to run the tests as nobody
	uid, gid := uint32(65534), uint32(65534)
	if u, err := user.Lookup("nobody"); err == nil {
		n, _ := strconv.Atoi(u.Uid)
		g, _ := strconv.Atoi(u.Gid)
		uid, gid = uint32(n), uint32(g)
	}
	// Directories nobody can read (the binaries) and write (its temp).
	bins, err := os.MkdirTemp("", "flotilla-qemu-tests-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bins)
	home := filepath.Join(bins, "home")
	for _, d := range []string{bins, home} {
		os.MkdirAll(d, 0o755)
		os.Chmod(d, 0o755)
	}
	os.Chown(home, int(uid), int(gid))

	start := time.Now()
	out, err := try([]string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64"}, "go", append([]string{"test", "-c", "-o", bins + "/"}, qemuPackages...)...)
	if err != nil {
		t.Fatalf("go test -c for arm64: %v\n%s", err, out)
	}
	t.Logf("compiled %d test binaries for arm64 in %s", len(qemuPackages), time.Since(start).Round(time.Second))

	for _, pkg := range qemuPackages {
		name := filepath.Base(pkg)
		t.Run(name, func(t *testing.T) {
			bin := filepath.Join(bins, name+".test")
			if _, err := os.Stat(bin); err != nil {
				t.Fatalf("go test -c made no %s: %v", bin, err)
			}
			start := time.Now()
			args := []string{bin, "-test.v", "-test.count=1", "-test.timeout=5m"}
			cmd := exec.Command("qemu-aarch64-static", args...)
			cmd.Dir = home
			cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home, "TMPDIR=" + home}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
			var buf bytes.Buffer
			cmd.Stdout, cmd.Stderr = &buf, &buf
			err := cmd.Run()
			passed, skipped := strings.Count(buf.String(), "--- PASS"), strings.Count(buf.String(), "--- SKIP")
			if err != nil || passed == 0 {
				t.Fatalf("%s under qemu-aarch64-static: %v (%d passed)\n%s", pkg, err, passed, buf.String())
			}
			t.Logf("%s on arm64: %d passed, %d skipped (need root), in %s", pkg, passed, skipped, time.Since(start).Round(time.Millisecond))
		})
	}
}
