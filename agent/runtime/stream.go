package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"

	"flotilla.dev/flotilla/agent/runtime/podns"
)

// TermSize is a terminal's size in characters.
type TermSize struct{ Width, Height uint16 }

// ExecIO is an interactive command's streams; nil ones are not opened.
// With TTY the command gets a terminal, which carries stderr too (Stderr
// is ignored) and takes its size from Resize.
type ExecIO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	TTY            bool
	Resize         <-chan TermSize
}

// ExecStream runs argv in a running container (like Exec: its
// namespaces, user, env and cgroup) with the caller's streams, for as
// long as it runs, and returns its exit code. The end of Stdin is passed
// on (the command sees EOF); the end of ctx kills the command.
func (r *Runtime) ExecStream(ctx context.Context, id string, argv []string, eio ExecIO) (int, error) {
	if len(argv) == 0 {
		return 0, fmt.Errorf("%w: exec in %s: empty command", ErrInvalid, id)
	}
	ctx = r.ctx(ctx)
	c, _, err := r.load(ctx, id)
	if err != nil {
		return 0, err
	}
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return 0, fmt.Errorf("exec in container %s: not running: %w", id, ErrNotFound)
	}
	if err != nil {
		return 0, err
	}
	spec, err := c.Spec(ctx)
	if err != nil {
		return 0, err
	}
	pspec := *spec.Process
	pspec.Args = argv
	pspec.Terminal = eio.TTY
	if eio.TTY && !slices.ContainsFunc(pspec.Env, func(e string) bool { return strings.HasPrefix(e, "TERM=") }) {
		// As containerd's CRI exec does: programs need it to drive the terminal.
		pspec.Env = append(slices.Clip(pspec.Env), "TERM=xterm")
	}
	// The shim needs every output pipe it is not given a terminal for.
	stdout, stderr := eio.Stdout, eio.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	switch {
	case eio.TTY:
		stderr = nil
	case stderr == nil:
		stderr = io.Discard
	}
	var stdin *stdinCloser
	var in io.Reader
	if eio.Stdin != nil {
		stdin = &stdinCloser{r: eio.Stdin, ctx: context.WithoutCancel(ctx), ready: make(chan struct{})}
		in = stdin
	}
	opts := []cio.Opt{cio.WithStreams(in, stdout, stderr)}
	if eio.TTY {
		opts = append(opts, cio.WithTerminal)
	}
	b := make([]byte, 8)
	rand.Read(b)
	execID := "exec-" + hex.EncodeToString(b)
	proc, err := task.Exec(ctx, execID, &pspec, cio.NewCreator(opts...))
	if err != nil {
		if stdin != nil {
			close(stdin.ready)
		}
		return 0, fmt.Errorf("exec %q in container %s: %w", argv, id, err)
	}
	if stdin != nil {
		stdin.proc = proc
		close(stdin.ready)
	}
	defer proc.Delete(context.WithoutCancel(ctx), containerd.WithProcessKill)
	exited, err := proc.Wait(ctx)
	if err != nil {
		return 0, fmt.Errorf("exec %q in container %s: %w", argv, id, err)
	}
	if err := proc.Start(ctx); err != nil {
		return 0, fmt.Errorf("exec %q in container %s: %w", argv, id, err)
	}
	if eio.TTY && eio.Resize != nil {
		go func() {
			for sz := range eio.Resize {
				// A resize racing the end of the command fails harmlessly.
				proc.Resize(ctx, uint32(sz.Width), uint32(sz.Height))
			}
		}()
	}
	select {
	case st := <-exited:
		proc.IO().Wait()
		code, _, err := st.Result()
		if err != nil {
			return 0, fmt.Errorf("exec %q in container %s: %w", argv, id, err)
		}
		return int(code), nil
	case <-ctx.Done():
		proc.Kill(context.WithoutCancel(ctx), syscall.SIGKILL)
		<-exited
		return 0, ctx.Err()
	}
}

// stdinCloser passes the end of the caller's stdin on to the process:
// the shim holds the stdin pipe open until told to close it.
type stdinCloser struct {
	r     io.Reader
	ctx   context.Context
	ready chan struct{} // closed once proc is set (or exec failed)
	proc  containerd.Process
	once  sync.Once
}

func (s *stdinCloser) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err == io.EOF {
		s.once.Do(func() {
			<-s.ready
			if s.proc != nil {
				s.proc.CloseIO(s.ctx, containerd.WithStdinCloser)
			}
		})
	}
	return n, err
}

// DialPod connects to port on the loopback inside the sandbox's network
// namespace (the host's for a host-network pod): what kubectl
// port-forward reaches, without a helper process.
func (r *Runtime) DialPod(ctx context.Context, sb *Sandbox, port uint16) (net.Conn, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))
	var d net.Dialer
	if sb.NetNS() == "" {
		return d.DialContext(ctx, "tcp", addr)
	}
	var c net.Conn
	// The socket is made on a thread inside the namespace and stays there.
	err := podns.Do(sb.NetNS(), func() error {
		var err error
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial port %d in pod %s/%s: %w", port, sb.Pod.Namespace, sb.Pod.Name, err)
	}
	return c, nil
}
