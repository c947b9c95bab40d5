package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/typeurl/v2"
)

// EventType is what happened to a container.
type EventType string

const (
	EventStart EventType = "start"
	EventExit  EventType = "exit"
	EventOOM   EventType = "oom"
)

// Event tells a watcher that a container changed; the watcher reads the
// current status rather than trusting the event's content.
type Event struct {
	Type        EventType
	ContainerID string
	ExitCode    uint32
	Time        time.Time
}

// Watch follows containerd's task events in this runtime's namespace and
// calls fn for each start, exit and OOM of a container's main process,
// until ctx ends. It records exits and OOM kills as they happen, so a
// container's last state is kept even if nobody asks for it before the
// task would be cleaned up. The subscription is renewed if containerd
// restarts; events missed meanwhile are covered by the status being
// computed from containerd on every read.
func (r *Runtime) Watch(ctx context.Context, fn func(Event)) error {
	ctx = r.ctx(ctx)
	filter := fmt.Sprintf(`namespace==%q,topic~="^/tasks/(start|exit|oom)$"`, r.cfg.Namespace)
	for {
		evs, errs := r.client.Subscribe(ctx, filter)
	recv:
		for {
			select {
			case <-ctx.Done():
				return nil
			case err := <-errs:
				if ctx.Err() != nil {
					return nil
				}
				slog.Warn("containerd event stream broke; resubscribing", "namespace", r.cfg.Namespace, "err", err)
				break recv
			case env := <-evs:
				if env == nil || env.Event == nil {
					continue
				}
				v, err := typeurl.UnmarshalAny(env.Event)
				if err != nil {
					continue
				}
				if ev, ok := r.handle(ctx, v); ok && fn != nil {
					ev.Time = env.Timestamp
					fn(ev)
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func (r *Runtime) handle(ctx context.Context, v any) (Event, bool) {
	switch e := v.(type) {
	case *apievents.TaskStart:
		return Event{Type: EventStart, ContainerID: e.ContainerID}, true
	case *apievents.TaskOOM:
		if c, err := r.client.LoadContainer(ctx, e.ContainerID); err == nil {
			c.SetLabels(ctx, map[string]string{labelOOMKilled: "true"})
		}
		return Event{Type: EventOOM, ContainerID: e.ContainerID}, true
	case *apievents.TaskExit:
		if e.ID != e.ContainerID {
			return Event{}, false // an exec'd process, not the container
		}
		if _, err := r.ContainerStatus(ctx, e.ContainerID); err != nil {
			slog.Debug("record container exit", "container", e.ContainerID, "err", err)
		}
		return Event{Type: EventExit, ContainerID: e.ContainerID, ExitCode: e.ExitStatus}, true
	}
	return Event{}, false
}
