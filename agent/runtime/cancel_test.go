package runtime

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
)

// shims lists the PIDs of containerd shims serving a containerd namespace.
func shims(ns string) []string {
	var pids []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmd, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		if bytes.Contains(cmd, []byte("\x00-namespace\x00"+ns+"\x00")) {
			pids = append(pids, filepath.Base(d))
		}
	}
	return pids
}

func noShimsLeft(t *testing.T, e *env) {
	t.Helper()
	eventually(t, "every shim gone once its container is removed", func() error {
		if pids := shims(e.rt.cfg.Namespace); len(pids) > 0 {
			return fmt.Errorf("shims still running: %v", pids)
		}
		return nil
	})
}

// cancelPoints are how far into a call a test cancels it, every step up
// to last: before, while and after containerd talks to the shim.
func cancelPoints(step, last time.Duration) []time.Duration {
	var ds []time.Duration
	for d := time.Duration(0); d <= last; d += step {
		ds = append(ds, d)
	}
	return ds
}

// A kubelet gives up on a start when it stops or the pod goes. However
// late that comes, the container is either started or has no task, and
// once it is removed no shim is left.
func TestCancelledStartLeavesNoShim(t *testing.T) {
	e := newEnv(t)
	sb := e.sandbox(t, "quitter")
	// A start takes ~150 ms here.
	for i, d := range cancelPoints(12*time.Millisecond, 200*time.Millisecond) {
		c, err := e.rt.CreateContainer(context.Background(), ContainerConfig{Pod: sb.Pod, Name: fmt.Sprintf("app%d", i), Image: e.image, Sandbox: sb})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		err = e.rt.StartContainer(ctx, c.ID)
		cancel()
		if err == nil {
			st, err := e.rt.ContainerStatus(context.Background(), c.ID)
			if err != nil || st.Status.State != StateRunning {
				t.Errorf("start cancelled after %v returned nil, but the container is %+v (%v)", d, st.Status, err)
			}
		}
		// Removed at once, as a kubelet told to stop a pod does.
		if err := e.rt.RemoveContainer(context.Background(), c.ID); err != nil {
			t.Fatal(err)
		}
	}
	noShimsLeft(t, e)
}

// A container's exit is recorded and its task deleted by whoever reads
// its status first, often a pod worker that an agent's shutdown cancels.
// A delete cut short after the shim removed the container would leave the
// shim running, tracked by nothing: containerd 1.6 then forgets the task
// without telling its shim to exit.
func TestCancelledExitRecordLeavesNoShim(t *testing.T) {
	e := newEnv(t)
	sb := e.sandbox(t, "crasher")
	// Recording an exit takes ~80 ms here, most of it the task's delete.
	for i, d := range cancelPoints(4*time.Millisecond, 100*time.Millisecond) {
		c := e.run(t, sb, fmt.Sprintf("app%d", i), func(cfg *ContainerConfig) {
			cfg.Env = append(cfg.Env, "CRASH_AFTER=0s", "EXIT_CODE=3")
		})
		// Exited, and not yet recorded.
		eventually(t, "the container exits", func() error {
			ctx := e.rt.ctx(context.Background())
			cc, err := e.rt.client.LoadContainer(ctx, c.ID)
			if err != nil {
				return err
			}
			task, err := cc.Task(ctx, nil)
			if err != nil {
				return err
			}
			st, err := task.Status(ctx)
			if err != nil {
				return err
			}
			if st.Status != containerd.Stopped {
				return fmt.Errorf("task %s", st.Status)
			}
			return nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), d)
		st, err := e.rt.ContainerStatus(ctx, c.ID)
		cancel()
		if err == nil && (st.Status.State != StateExited || st.Status.ExitCode != 3) {
			t.Errorf("status cancelled after %v: %+v, want exited with 3", d, st.Status)
		}
		if err := e.rt.RemoveContainer(context.Background(), c.ID); err != nil {
			t.Fatal(err)
		}
	}
	noShimsLeft(t, e)
}
