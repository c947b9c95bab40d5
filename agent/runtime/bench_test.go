package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkCreateStartStop measures one container's create, start (task
// running, logger attached) and stop with the image already unpacked, in
// an existing sandbox: the runtime's share of a pod start.
func BenchmarkCreateStartStop(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	sb, err := e.rt.CreateSandbox(ctx, SandboxConfig{Pod: PodRef{UID: "uid-bench", Namespace: "default", Name: "bench"}, Hostname: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := e.rt.CreateContainer(ctx, ContainerConfig{Pod: sb.Pod, Name: "app", Attempt: uint32(i), Image: e.image, Sandbox: sb, Env: []string{fmt.Sprintf("LISTEN=:%d", 9000+i%1000)}})
		if err != nil {
			b.Fatal(err)
		}
		if err := e.rt.StartContainer(ctx, c.ID); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, err := e.rt.StopContainer(ctx, c.ID, 5*time.Second); err != nil {
			b.Fatal(err)
		}
		if err := e.rt.RemoveContainer(ctx, c.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
