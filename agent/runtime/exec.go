package runtime

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
)

// MaxExecOutput bounds what Exec keeps of a command's output, like the
// kubelet's limit on probe output.
const MaxExecOutput = 64 << 10

// ExecResult is the outcome of a command run in a container.
type ExecResult struct {
	ExitCode int
	// Output is stdout and stderr interleaved, cut at MaxExecOutput.
	Output []byte
}

// Exec runs argv in a running container (same namespaces, user, env and
// cgroup as its main process) and waits up to timeout. On timeout the
// command is killed and ErrExecTimeout returned.
func (r *Runtime) Exec(ctx context.Context, id string, argv []string, timeout time.Duration) (ExecResult, error) {
	if len(argv) == 0 {
		return ExecResult{}, fmt.Errorf("%w: exec in %s: empty command", ErrInvalid, id)
	}
	ctx = r.ctx(ctx)
	c, _, err := r.load(ctx, id)
	if err != nil {
		return ExecResult{}, err
	}
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return ExecResult{}, fmt.Errorf("exec in container %s: not running: %w", id, ErrNotFound)
	}
	if err != nil {
		return ExecResult{}, err
	}
	spec, err := c.Spec(ctx)
	if err != nil {
		return ExecResult{}, err
	}
	pspec := *spec.Process
	pspec.Args = argv
	pspec.Terminal = false

	b := make([]byte, 8)
	rand.Read(b)
	execID := "exec-" + hex.EncodeToString(b)
	out := &limitedBuffer{max: MaxExecOutput}
	proc, err := task.Exec(ctx, execID, &pspec, cio.NewCreator(cio.WithStreams(nil, out, out)))
	if err != nil {
		return ExecResult{}, fmt.Errorf("exec %q in container %s: %w", argv, id, err)
	}
	defer proc.Delete(context.WithoutCancel(ctx), containerd.WithProcessKill)
	exited, err := proc.Wait(ctx)
	if err != nil {
		return ExecResult{}, fmt.Errorf("exec %q in container %s: %w", argv, id, err)
	}
	if err := proc.Start(ctx); err != nil {
		return ExecResult{}, fmt.Errorf("exec %q in container %s: %w", argv, id, err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case st := <-exited:
		proc.IO().Wait()
		code, _, err := st.Result()
		if err != nil {
			return ExecResult{}, fmt.Errorf("exec %q in container %s: %w", argv, id, err)
		}
		return ExecResult{ExitCode: int(code), Output: out.Bytes()}, nil
	case <-timer.C:
		proc.Kill(context.WithoutCancel(ctx), syscall.SIGKILL)
		<-exited
		return ExecResult{Output: out.Bytes()}, fmt.Errorf("exec %q in container %s after %s: %w", argv, id, timeout, ErrExecTimeout)
	case <-ctx.Done():
		proc.Kill(context.WithoutCancel(ctx), syscall.SIGKILL)
		return ExecResult{}, ctx.Err()
	}
}

// limitedBuffer keeps the first max bytes written and drops the rest.
type limitedBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.max - l.buf.Len(); room > 0 {
		if len(p) > room {
			l.buf.Write(p[:room])
		} else {
			l.buf.Write(p)
		}
	}
	return len(p), nil
}

func (l *limitedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.buf.Bytes()...)
}
