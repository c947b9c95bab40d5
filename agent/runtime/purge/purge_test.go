package purge_test

import (
	"context"
	"path/filepath"
	"testing"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"

	"flotilla.dev/flotilla/agent/runtime/purge"
	"flotilla.dev/flotilla/registry"
	"flotilla.dev/flotilla/test/testimage"
)

// TestDeleteNamespace runs a task in a namespace of the test's and
// deletes the namespace under it.
func TestDeleteNamespace(t *testing.T) {
	client, ns := testimage.Containerd(t)
	ctx := namespaces.WithNamespace(context.Background(), ns)
	p, err := registry.NewPuller(client, registry.PullerConfig{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := p.Pull(ctx, testimage.App(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewContainer(ctx, "app",
		containerd.WithImage(pulled.Image),
		containerd.WithNewSnapshot("app", pulled.Image),
		containerd.WithNewSpec(oci.WithImageConfig(pulled.Image), oci.WithHostNamespace("network")),
	)
	if err != nil {
		t.Fatal(err)
	}
	task, err := c.NewTask(ctx, cio.NullIO)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Start(ctx); err != nil {
		t.Fatal(err)
	}

	// runc's parent cgroups (cgroup v1 or v2), where its cgroupfs driver
	// made them.
	cgroups := func() []string {
		v1, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", ns))
		v2, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", ns))
		return append(v1, v2...)
	}
	before := cgroups()

	if err := purge.DeleteNamespace(context.Background(), client, ns); err != nil {
		t.Fatal(err)
	}
	all, err := client.NamespaceService().List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range all {
		if n == ns {
			t.Fatalf("namespace %s is still there", ns)
		}
	}
	if imgs, err := client.ImageService().List(ctx); err != nil || len(imgs) > 0 {
		t.Errorf("images left: %v %v", imgs, err)
	}
	if len(before) == 0 {
		t.Logf("no cgroup named %s while the task ran", ns)
	}
	if left := cgroups(); len(left) > 0 {
		t.Errorf("cgroups left: %v (there were %v)", left, before)
	}
	// A namespace that is gone is no error: cleanup can be repeated.
	if err := purge.DeleteNamespace(context.Background(), client, ns); err != nil {
		t.Errorf("again: %v", err)
	}
}
