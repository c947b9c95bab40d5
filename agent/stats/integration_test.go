package stats

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"flotilla.dev/flotilla/agent/runtime"
	"flotilla.dev/flotilla/internal/testbin"
	"flotilla.dev/flotilla/internal/testenv"
	"flotilla.dev/flotilla/registry"
	"flotilla.dev/flotilla/test/testimage"
)

// A real container burning a CPU and holding 64 MiB: its figures, read
// from containerd twice, move as it does.
func TestContainerdFiguresOfABusyContainer(t *testing.T) {
	testenv.RequireRoot(t, "runs a container with containerd")
	client, ns := testimage.Containerd(t)
	ctx := context.Background()
	puller, err := registry.NewPuller(client, registry.PullerConfig{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := puller.Pull(ctx, testimage.App(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rt, err := runtime.New(runtime.Config{Client: client, Namespace: ns, RunDir: filepath.Join(dir, "run"), LogDir: filepath.Join(dir, "logs"),
		LoggerPath: testbin.Path(t, "flotilla-logger")})
	if err != nil {
		t.Fatal(err)
	}
	pod := runtime.PodRef{UID: "uid-busy", Namespace: "default", Name: "busy"}
	sb, err := rt.CreateSandbox(ctx, runtime.SandboxConfig{Pod: pod, Hostname: "busy"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.RemoveSandbox(context.Background(), sb.ID) })
	c, err := rt.CreateContainer(ctx, runtime.ContainerConfig{Pod: pod, Name: "burner", Image: pulled.Image.Name(), Sandbox: sb,
		Env: []string{"BURN_CPU=true", "ALLOC_MIB=64"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.RemoveContainer(context.Background(), c.ID) })
	if err := rt.StartContainer(ctx, c.ID); err != nil {
		t.Fatal(err)
	}

	col := &Collector{
		Containers: &ContainerdSource{Client: client, Namespace: ns},
		Node:       &HostSource{Filesystems: []FilesystemPath{{Name: "data", Path: dir}}},
	}
	var first, second Snapshot
	var u Usage
	// The allocation happens as the app starts; wait for it to show.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if first, err = col.Collect(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if second, err = col.Collect(ctx); err != nil {
			t.Fatal(err)
		}
		u = Rates(first, second)
		if len(u.Pods) == 1 && u.Pods[0].Containers[0].MemoryWorkingSet >= 64<<20 || time.Now().After(deadline) {
			break
		}
	}
	if len(u.Pods) != 1 || u.Pods[0].Name != "busy" || len(u.Pods[0].Containers) != 1 {
		t.Fatalf("pods = %+v, want busy with its burner", u.Pods)
	}
	b := u.Pods[0].Containers[0]
	t.Logf("burner: %d nanocores, %d bytes working set, writable layer %d bytes (%v); device: %d nanocores, %d bytes",
		b.CPUNanoCores, b.MemoryWorkingSet, b.FSUsed, b.HasFS, u.NodeCPUNanoCores, u.NodeMemoryWorkingSet)
	// One busy goroutine on a shared machine: well above idle, at most
	// the machine.
	if b.CPUNanoCores < 2e8 {
		t.Errorf("the burner used %d nanocores, want at least 0.2 of a core", b.CPUNanoCores)
	}
	if b.MemoryWorkingSet < 64<<20 || b.MemoryWorkingSet > 512<<20 {
		t.Errorf("the burner's working set is %d bytes, want its 64 MiB and little more", b.MemoryWorkingSet)
	}
	if !b.HasFS {
		t.Error("no writable layer size from the snapshotter")
	}
	if u.NodeCPUNanoCores < b.CPUNanoCores/2 || u.NodeMemoryWorkingSet < b.MemoryWorkingSet {
		t.Errorf("the device (%d nanocores, %d bytes) used less than its container", u.NodeCPUNanoCores, u.NodeMemoryWorkingSet)
	}
	if len(second.Node.Filesystems) != 1 || second.Node.Filesystems[0].Capacity == 0 {
		t.Errorf("filesystems = %+v, want the data dir's", second.Node.Filesystems)
	}
	if second.Containers[0].CPUNanos <= first.Containers[0].CPUNanos {
		t.Errorf("the CPU counter did not move: %d then %d", first.Containers[0].CPUNanos, second.Containers[0].CPUNanos)
	}
}
