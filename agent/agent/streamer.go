package agent

import (
	"context"
	"fmt"
	"net"

	"flotilla.dev/flotilla/agent/runtime"
	"flotilla.dev/flotilla/agent/server"
)

// podStreamer runs the agent server's exec, attach and port-forward sessions in
// the runtime's containers and sandboxes, found by the pod's namespace
// and name as the hub asks for them.
type podStreamer struct{ rt *runtime.Runtime }

var _ server.Streamer = podStreamer{}

func (p podStreamer) Exec(ctx context.Context, ref server.ContainerRef, cmd []string, s server.Streams) (int, error) {
	found, err := p.running(ctx, ref)
	if err != nil {
		return 0, err
	}
	return p.rt.ExecStream(ctx, found.ID, cmd, execIO(ctx, s))
}

func (p podStreamer) AttachMode(ctx context.Context, ref server.ContainerRef) (server.AttachMode, error) {
	found, err := p.running(ctx, ref)
	if err != nil {
		return server.AttachMode{}, err
	}
	return server.AttachMode{Stdin: found.Stdin, StdinOnce: found.StdinOnce, TTY: found.TTY}, nil
}

func (p podStreamer) Attach(ctx context.Context, ref server.ContainerRef, s server.Streams) error {
	found, err := p.running(ctx, ref)
	if err != nil {
		return err
	}
	return p.rt.Attach(ctx, found.ID, execIO(ctx, s))
}

// running finds the named container's running attempt.
func (p podStreamer) running(ctx context.Context, ref server.ContainerRef) (*runtime.Container, error) {
	cs, err := p.rt.ListContainers(ctx, runtime.ListFilter{})
	if err != nil {
		return nil, err
	}
	var found *runtime.Container
	for _, c := range cs {
		if c.Pod.Namespace != ref.Namespace || c.Pod.Name != ref.Pod || c.Name != ref.Container || c.Status.State != runtime.StateRunning {
			continue
		}
		// A pod of the same name being replaced: the newest one.
		if found == nil || c.CreatedAt.After(found.CreatedAt) {
			found = c
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%w: container %s is not running in pod %s/%s on this device", server.ErrNotFound, ref.Container, ref.Namespace, ref.Pod)
	}
	return found, nil
}

// execIO is a session's streams as the runtime takes them.
func execIO(ctx context.Context, s server.Streams) runtime.ExecIO {
	var resize chan runtime.TermSize
	if s.Resize != nil {
		resize = make(chan runtime.TermSize)
		go func() {
			defer close(resize)
			for sz := range s.Resize {
				select {
				case resize <- runtime.TermSize(sz):
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	return runtime.ExecIO{Stdin: s.Stdin, Stdout: s.Stdout, Stderr: s.Stderr, TTY: s.TTY, Resize: resize}
}

func (p podStreamer) DialPod(ctx context.Context, namespace, pod string, port uint16) (net.Conn, error) {
	sbs, err := p.rt.ListSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	var found *runtime.Sandbox
	for _, sb := range sbs {
		if sb.Pod.Namespace == namespace && sb.Pod.Name == pod && (found == nil || sb.CreatedAt.After(found.CreatedAt)) {
			found = sb
		}
	}
	if found == nil || !found.Ready() {
		return nil, fmt.Errorf("%w: pod %s/%s has no running sandbox on this device", server.ErrNotFound, namespace, pod)
	}
	return p.rt.DialPod(ctx, found, port)
}
