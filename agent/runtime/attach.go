package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"

	"flotilla.dev/flotilla/agent/runtime/logdriver"
)

// ErrNoStdin is returned when stdin is written to a container that was
// not started with one.
var ErrNoStdin = errors.New("does not have stdin enabled")

// ioDrainTimeout bounds how long a removed or exited container's output
// is read after its task is gone, so the last lines reach the log.
const ioDrainTimeout = 3 * time.Second

func interactive(l map[string]string) bool {
	return l[labelStdin] == "true" || l[labelTTY] == "true"
}

// attachIO is an interactive container's IO: FIFOs between the shim and
// this process. Its output is copied to the container's log and to the
// attached sessions; its stdin is held open between sessions.
type attachIO struct {
	id       string
	tty      bool
	once     bool
	dir      string
	dio      *cio.DirectIO
	done     chan struct{} // closed when the output has ended
	mu       sync.Mutex
	stdin    io.WriteCloser // nil when there is none (any more)
	sessions map[*ExecIO]struct{}
	// abandoned: the runtime dropped this IO without cleaning up (a test
	// standing in for an agent that dies).
	abandoned bool
}

func (r *Runtime) ioDir(id string) string { return filepath.Join(r.cfg.RunDir, "io", id) }

// startInteractive starts a container whose process has a stdin or a
// terminal. containerd's binary log driver gives a process neither, so
// its output comes through FIFOs this runtime reads into the log.
func (r *Runtime) startInteractive(ctx context.Context, c containerd.Container, info containers.Container) error {
	id := c.ID()
	dir := r.ioDir(id)
	os.RemoveAll(dir) // a start that failed before
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	a, err := r.openIO(c.ID(), info.Labels)
	if err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("start container %s: %w", id, err)
	}
	fail := func(err error) error {
		a.forceClose()
		return fmt.Errorf("start container %s (%s of pod %s/%s): %w", id, info.Labels[LabelContainerName], info.Labels[LabelPodNamespace], info.Labels[LabelPodName], err)
	}
	task, err := c.NewTask(ctx, func(string) (cio.IO, error) { return a.dio, nil })
	if err != nil {
		return fail(err)
	}
	if err := task.Start(ctx); err != nil {
		task.Delete(ctx, containerd.WithProcessKill)
		return fail(err)
	}
	if _, err := c.SetLabels(ctx, map[string]string{labelStartedAt: time.Now().UTC().Format(time.RFC3339Nano)}); err != nil {
		return fmt.Errorf("record start of container %s: %w", id, err)
	}
	return nil
}

// openIO opens (creating when missing) a container's FIFOs in its IO
// directory, registers them and starts copying the output.
func (r *Runtime) openIO(id string, labels map[string]string) (*attachIO, error) {
	dir := r.ioDir(id)
	tty := labels[labelTTY] == "true"
	cfg := cio.Config{Stdout: filepath.Join(dir, "stdout"), Terminal: tty}
	if !tty {
		cfg.Stderr = filepath.Join(dir, "stderr")
	}
	if labels[labelStdin] == "true" && labels[labelStdinClosed] != "true" {
		cfg.Stdin = filepath.Join(dir, "stdin")
	}
	logPath := labels[labelLogPath]
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	lf, err := logdriver.Open(logPath, r.cfg.LogMaxSize, r.cfg.LogMaxFiles)
	if err != nil {
		return nil, err
	}
	// The FIFOs outlive any request: opening one waits for its other end.
	dio, err := cio.NewDirectIO(context.Background(), cio.NewFIFOSet(cfg, nil))
	if err != nil {
		lf.Close()
		return nil, fmt.Errorf("open the IO of container %s: %w", id, err)
	}
	a := &attachIO{id: id, tty: tty, once: labels[labelStdinOnce] == "true", dir: dir, dio: dio,
		done: make(chan struct{}), sessions: map[*ExecIO]struct{}{}}
	if dio.Stdin != nil {
		a.stdin = dio.Stdin
	}
	var wg sync.WaitGroup
	for _, s := range []struct {
		name string
		r    io.Reader
	}{{"stdout", dio.Stdout}, {"stderr", dio.Stderr}} {
		if s.r == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := io.TeeReader(s.r, writerFunc(func(p []byte) { a.broadcast(s.name, p) }))
			if err := logdriver.Copy(lf, s.name, out, logdriver.DefaultMaxLine); err != nil && !a.isAbandoned() {
				slog.Warn("container output", "container", id, "stream", s.name, "err", err)
				io.Copy(io.Discard, out) // never block the container
			}
		}()
	}
	go func() {
		wg.Wait()
		lf.Close()
		close(a.done)
		if a.isAbandoned() {
			return
		}
		dio.Close()
		os.RemoveAll(dir)
		r.ioMu.Lock()
		if r.ios[id] == a {
			delete(r.ios, id)
		}
		r.ioMu.Unlock()
	}()
	r.ioMu.Lock()
	r.ios[id] = a
	r.ioMu.Unlock()
	return a, nil
}

type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

// broadcast hands output to the attached sessions; one whose client
// fails to take it is dropped, the others and the log carry on.
func (a *attachIO) broadcast(stream string, p []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for s := range a.sessions {
		w := s.Stdout
		if stream == "stderr" {
			w = s.Stderr
		}
		if w == nil {
			continue
		}
		if _, err := w.Write(p); err != nil {
			delete(a.sessions, s)
		}
	}
}

func (a *attachIO) isAbandoned() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.abandoned
}

// reattach takes over a running interactive container's FIFOs when this
// runtime does not hold them (the agent restarted): the shim keeps its
// ends open meanwhile, so stdin stays open and output waits in the pipes.
func (r *Runtime) reattach(_ context.Context, c containerd.Container, info containers.Container) (*attachIO, error) {
	if !r.ownsIO {
		return nil, nil
	}
	r.reattachMu.Lock()
	defer r.reattachMu.Unlock()
	r.ioMu.Lock()
	a := r.ios[c.ID()]
	r.ioMu.Unlock()
	if a != nil {
		return a, nil
	}
	// FIFOs are made only by the start: missing ones mean the output has
	// ended and been cleaned up.
	if _, err := os.Stat(filepath.Join(r.ioDir(c.ID()), "stdout")); err != nil {
		return nil, fmt.Errorf("the IO of container %s is gone (%w); its output cannot be attached to", c.ID(), err)
	}
	return r.openIO(c.ID(), info.Labels)
}

// closeIO ends a container's IO once its task is gone, after giving the
// output left in the pipes a moment to reach the log.
func (r *Runtime) closeIO(id string) {
	r.ioMu.Lock()
	a := r.ios[id]
	r.ioMu.Unlock()
	if a == nil {
		os.RemoveAll(r.ioDir(id))
		return
	}
	select {
	case <-a.done:
	case <-time.After(ioDrainTimeout):
		a.forceClose()
	}
}

// forceClose ends the IO without waiting for the shim to end the output.
func (a *attachIO) forceClose() {
	a.dio.Cancel()
	a.dio.Close()
	<-a.done
}

// abandonIO drops every container's IO the way a dying agent does: the
// FIFOs are closed and nothing is cleaned up.
func (r *Runtime) abandonIO() {
	r.ioMu.Lock()
	defer r.ioMu.Unlock()
	for id, a := range r.ios {
		a.mu.Lock()
		a.abandoned = true
		a.mu.Unlock()
		a.dio.Cancel()
		a.dio.Close()
		delete(r.ios, id)
	}
}

// Attach joins the main process of a running container started with
// stdin or a terminal, as the kubelet's attach does: its output from now
// on (also still written to the log) and, with eio.Stdin, its stdin. It
// returns when the process's output ends, when ctx ends, or when
// eio.Stdin ends — which closes the process's stdin if it was started
// with stdinOnce and no terminal, and otherwise only ends this session.
// With stdinOnce, the first session with stdin closes the process's
// stdin when it ends, whatever ends it.
func (r *Runtime) Attach(ctx context.Context, id string, eio ExecIO) error {
	ctx = r.ctx(ctx)
	c, info, err := r.load(ctx, id)
	if err != nil {
		return err
	}
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return fmt.Errorf("attach to container %s: not running: %w", id, ErrNotFound)
	}
	if err != nil {
		return err
	}
	if !interactive(info.Labels) {
		return fmt.Errorf("%w: attach to container %s: it was started without stdin or a terminal; its output is in its log", ErrInvalid, id)
	}
	if eio.Stdin != nil && info.Labels[labelStdin] != "true" {
		return fmt.Errorf("attach to container %s: %w", id, ErrNoStdin)
	}
	a, err := r.reattach(ctx, c, info)
	if err != nil {
		return fmt.Errorf("attach to container %s: %w", id, err)
	}
	if a == nil {
		return fmt.Errorf("%w: attach to container %s: this runtime cannot attach (opened for cleanup)", ErrInvalid, id)
	}
	sess := eio
	if a.tty {
		sess.Stderr = nil
	}
	a.mu.Lock()
	a.sessions[&sess] = struct{}{}
	stdin := a.stdin
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.sessions, &sess)
		a.mu.Unlock()
	}()
	if a.tty && eio.Resize != nil {
		go func() {
			for sz := range eio.Resize {
				task.Resize(ctx, uint32(sz.Width), uint32(sz.Height))
			}
		}()
	}
	var detach chan struct{}
	if eio.Stdin != nil && stdin != nil {
		if a.once {
			defer r.closeStdin(context.WithoutCancel(ctx), c, task, a)
		}
		detach = make(chan struct{})
		go func() {
			io.Copy(stdin, eio.Stdin)
			if a.once && !a.tty {
				// The process sees EOF; its output still comes here.
				r.closeStdin(context.WithoutCancel(ctx), c, task, a)
				return
			}
			close(detach)
		}()
	}
	select {
	case <-a.done:
	case <-detach:
	case <-ctx.Done():
	}
	return nil
}

// closeStdin closes a stdinOnce process's stdin for good: the shim's
// hold on the FIFO first, then this side's, so the shim reads EOF; the
// label keeps a restarted agent from opening it again.
func (r *Runtime) closeStdin(ctx context.Context, c containerd.Container, task containerd.Task, a *attachIO) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stdin == nil {
		return
	}
	if _, err := c.SetLabels(ctx, map[string]string{labelStdinClosed: strconv.FormatBool(true)}); err != nil {
		slog.Warn("record closed stdin", "container", a.id, "err", err)
	}
	if err := task.CloseIO(ctx, containerd.WithStdinCloser); err != nil && !errdefs.IsNotFound(err) {
		slog.Warn("close stdin", "container", a.id, "err", err)
	}
	a.stdin.Close()
	a.stdin = nil
}
