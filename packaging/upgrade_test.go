package packaging

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"flotilla.dev/flotilla/test/testimage"
)

// TestUpgradeKeepsContainers installs the v1 agent package, runs the
// packaged agent standalone with a static pod, installs the v2 package over
// it and restarts the agent, and checks that the pod's container is the
// same process before and after.
//
// systemd is not PID 1 here, so the test plays its part. With the unit's
// KillMode=process, `systemctl try-restart` (what the v2 postinst runs)
// sends SIGTERM to the agent's main process only, waits for it, and starts
// ExecStart again: the test does exactly that, with ExecStart's command
// line. The agent's settings for the test (its own containerd namespace,
// data, log and manifests dirs) come as FLOTILLA_<KEY> variables, as an
// Environment= drop-in would give them, so the packaged agent.yaml stays
// untouched and dpkg upgrades it as a conffile. The static pod is not put
// in /etc/flotilla/manifests: the agents of `make demo` and of the e2e
// tests, which may run on this machine at the same time, read that
// directory too (they do not set --manifests-dir).
func TestUpgradeKeepsContainers(t *testing.T) {
	requireRoot(t)
	requireTools(t, "dpkg", "dpkg-deb", "unshare", "containerd", "runc", "iptables", testimage.RegistryBinary)
	if _, err := os.Stat(testimage.ContainerdSocket); err != nil {
		unavailable(t, "containerd is not running (%v); scripts/install-deps.sh starts it", err)
	}
	old, next := v1(t)["flotilla-agent.deb"], v2(t)["flotilla-agent.deb"]
	notInstalled(t)
	client, ns := testimage.Containerd(t)
	image := testimage.App(t)

	t.Cleanup(func() { purge(t) })
	run(t, nil, "dpkg", "--install", old)
	dir := t.TempDir()
	b := make([]byte, 3)
	rand.Read(b)
	node := "pkgtest-" + hex.EncodeToString(b)
	env := []string{
		"FLOTILLA_NODE_NAME=" + node,
		"FLOTILLA_CONTAINERD_NAMESPACE=" + ns,
		"FLOTILLA_DATA_DIR=" + filepath.Join(dir, "data"),
		"FLOTILLA_LOG_DIR=" + filepath.Join(dir, "logs"),
		"FLOTILLA_CNI_CONF_DIR=" + filepath.Join(dir, "net.d"),
		"FLOTILLA_MANIFESTS_DIR=" + filepath.Join(dir, "manifests"),
		"FLOTILLA_LOG_LEVEL=debug",
	}
	manifest := filepath.Join(dir, "manifests", node+".yaml")
	os.Mkdir(filepath.Dir(manifest), 0o755)
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: kiosk
  namespace: default
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: %s
    args: [sleep, 1h]
`, image)
	if err := os.WriteFile(manifest, []byte(pod), 0o644); err != nil {
		t.Fatal(err)
	}

	first := startAgent(t, env, filepath.Join(dir, "agent-v1.log"))
	t.Cleanup(func() {
		// What the operator runs to decommission a device: the pods,
		// their images and the containerd namespace go.
		// In a network namespace of its own: cleanup also removes
		// Flotilla's iptables chains and routes, and this machine's own
		// are not the test's to remove.
		os.Remove(manifest)
		if out, err := try(env, "unshare", "--net", "/usr/bin/flotilla-agent", "cleanup", "--pods", "--config", "/etc/flotilla/agent.yaml"); err != nil {
			t.Errorf("flotilla-agent cleanup --pods: %v\n%s", err, out)
		}
	})
	before := waitContainer(t, client, ns, first, 2*time.Minute)
	t.Logf("v1 agent (pid %d) runs container %s as pid %d", first.cmd.Process.Pid, before.id, before.pid)

	out := run(t, nil, "dpkg", "--install", next)
	t.Logf("dpkg --install v2:\n%s", out)
	if out := run(t, nil, "/usr/bin/flotilla-agent", "version"); !strings.Contains(out, v2Binary) {
		t.Fatalf("after the upgrade /usr/bin/flotilla-agent is %q, want %s", out, v2Binary)
	}

	first.stop(t) // SIGTERM to the main process only, as KillMode=process
	if now := containerOf(t, client, ns); now != before {
		t.Fatalf("with the agent stopped the container is %+v, was %+v", now, before)
	}
	second := startAgent(t, env, filepath.Join(dir, "agent-v2.log"))
	defer second.stop(t)
	second.waitLog(t, "agent started standalone", time.Minute)
	if !strings.Contains(second.output(), v2Binary) {
		t.Errorf("the restarted agent does not say it is %s:\n%s", v2Binary, second.output())
	}
	// The new agent syncs its pods at once; give it several resyncs to
	// do anything it would do to the container.
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if now := containerOf(t, client, ns); now != before {
			t.Fatalf("the upgrade replaced the container: before %+v, after %+v\nv2 agent:\n%s", before, now, second.output())
		}
		time.Sleep(time.Second)
	}
	t.Logf("after the upgrade the v2 agent (pid %d) still runs container %s as pid %d", second.cmd.Process.Pid, before.id, before.pid)
}

// agentProc is a running /usr/bin/flotilla-agent.
type agentProc struct {
	cmd  *exec.Cmd
	log  string
	done chan error
}

// startAgent runs the unit's ExecStart with env added.
func startAgent(t *testing.T, env []string, log string) *agentProc {
	t.Helper()
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/flotilla-agent", "run", "--config", "/etc/flotilla/agent.yaml")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &agentProc{cmd: cmd, log: log, done: make(chan error, 1)}
	go func() {
		a.done <- cmd.Wait()
		f.Close()
	}()
	t.Cleanup(func() { a.stop(t) })
	return a
}

func (a *agentProc) output() string {
	b, _ := os.ReadFile(a.log)
	return string(b)
}

// stop sends SIGTERM to the agent process alone and waits for it to end
// (idempotent).
func (a *agentProc) stop(t *testing.T) {
	t.Helper()
	if a.cmd.ProcessState != nil {
		return
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		a.cmd.Process.Kill()
		<-a.done
		t.Errorf("the agent did not stop within 30s of SIGTERM:\n%s", a.output())
	}
}

func (a *agentProc) waitLog(t *testing.T, what string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(a.output(), what) {
		if a.cmd.ProcessState != nil || time.Now().After(deadline) {
			t.Fatalf("the agent did not log %q:\n%s", what, a.output())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// container is the one container in the test's containerd namespace: its
// ID, its task's pid and that process's start time (a pid alone could be
// reused).
type container struct {
	id    string
	pid   uint32
	start string
}

// containerOf is the namespace's only container, zero while there is
// none running.
func containerOf(t *testing.T, client *containerd.Client, ns string) container {
	t.Helper()
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), ns), 10*time.Second)
	defer cancel()
	cs, err := client.Containers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 {
		return container{id: fmt.Sprintf("%d containers", len(cs))}
	}
	task, err := cs[0].Task(ctx, nil)
	if err != nil {
		return container{id: cs[0].ID()}
	}
	st, err := task.Status(ctx)
	if err != nil || st.Status != containerd.Running {
		return container{id: cs[0].ID()}
	}
	return container{id: cs[0].ID(), pid: task.Pid(), start: startTime(task.Pid())}
}

// startTime is field 22 of /proc/PID/stat, the process's start time.
func startTime(pid uint32) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command (field 2) may hold spaces; the fields after it do not.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 {
		if f := strings.Fields(string(b[i+1:])); len(f) > 19 {
			return f[19]
		}
	}
	return ""
}

func waitContainer(t *testing.T, client *containerd.Client, ns string, a *agentProc, timeout time.Duration) container {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if c := containerOf(t, client, ns); c.pid != 0 && c.start != "" {
			return c
		}
		if a.cmd.ProcessState != nil || time.Now().After(deadline) {
			t.Fatalf("no container running after %s:\n%s", timeout, a.output())
		}
		time.Sleep(500 * time.Millisecond)
	}
}
