package agentbench

import (
	"context"
	"fmt"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"

	"flotilla.dev/flotilla/agent/runtime"
)

// bare starts the pods' container with nothing but the containerd
// client: the floor under the agent's figure.
type bare struct {
	client *containerd.Client
	ns     string
	img    containerd.Image
	n      int
}

func (b *bench) newBare(ctx context.Context) (*bare, error) {
	ns := "flotilla-bench-bare-" + b.id
	if err := b.namespace(ctx, ns); err != nil {
		return nil, err
	}
	img, err := b.ctrd.GetImage(namespaces.WithNamespace(ctx, ns), b.image)
	if err != nil {
		return nil, fmt.Errorf("the test image in %s: %w", ns, err)
	}
	return &bare{client: b.ctrd, ns: ns, img: img}, nil
}

// start creates a container of the image (a snapshot, the image's
// config as its spec, new namespaces) and starts its task; it returns
// when the process runs, which is when Start returns. The container is
// removed afterwards, outside the time.
func (x *bare) start(ctx context.Context) (time.Duration, error) {
	ctx = namespaces.WithNamespace(ctx, x.ns)
	id := fmt.Sprintf("bare-%d", x.n)
	x.n++
	t0 := time.Now()
	c, err := x.client.NewContainer(ctx, id,
		containerd.WithImage(x.img),
		containerd.WithSnapshotter(runtime.DefaultSnapshotter),
		containerd.WithNewSnapshot(id, x.img),
		containerd.WithRuntime(runtime.DefaultRuntime, nil),
		containerd.WithNewSpec(oci.WithImageConfig(x.img), oci.WithEnv([]string{"DRAIN_DELAY=0s"})),
	)
	if err != nil {
		return 0, fmt.Errorf("bare containerd: create %s: %w", id, err)
	}
	defer c.Delete(context.WithoutCancel(ctx), containerd.WithSnapshotCleanup)
	task, err := c.NewTask(ctx, cio.NullIO)
	if err != nil {
		return 0, fmt.Errorf("bare containerd: task of %s: %w", id, err)
	}
	defer task.Delete(context.WithoutCancel(ctx), containerd.WithProcessKill)
	if err := task.Start(ctx); err != nil {
		return 0, fmt.Errorf("bare containerd: start %s: %w", id, err)
	}
	d := time.Since(t0)
	exited, err := task.Wait(ctx)
	if err == nil {
		_ = task.Kill(ctx, syscall.SIGKILL)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
	}
	return d, nil
}
