package kubelet

import (
	"context"
	"net"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"flotilla.dev/flotilla/agent/cni"
	"flotilla.dev/flotilla/agent/runtime"
	"flotilla.dev/flotilla/registry"
)

// The kubelet's state machine (restarts, init order, termination) is
// independent of containerd, CNI and registries; these interfaces are
// what it uses of each, so that it runs on fakes in unit tests and in
// simulated devices, and on the real daemons in the agent.

// Runtime makes sandboxes and containers real.
type Runtime interface {
	CreateSandbox(ctx context.Context, cfg runtime.SandboxConfig) (*runtime.Sandbox, error)
	// GetSandbox returns runtime.ErrNotFound for an unknown sandbox.
	GetSandbox(ctx context.Context, id string) (*runtime.Sandbox, error)
	ListSandboxes(ctx context.Context) ([]*runtime.Sandbox, error)
	SetSandboxIP(ctx context.Context, id, ip string) error
	RemoveSandbox(ctx context.Context, id string) error

	ImageConfig(ctx context.Context, image string) (ocispec.ImageConfig, error)
	CreateContainer(ctx context.Context, cfg runtime.ContainerConfig) (*runtime.Container, error)
	StartContainer(ctx context.Context, id string) error
	StopContainer(ctx context.Context, id string, grace time.Duration) (runtime.Status, error)
	RemoveContainer(ctx context.Context, id string) error
	// ContainerStatus returns runtime.ErrNotFound for an unknown container.
	ContainerStatus(ctx context.Context, id string) (*runtime.Container, error)
	ListContainers(ctx context.Context, f runtime.ListFilter) ([]*runtime.Container, error)
	RemovePodLogs(pod runtime.PodRef) error
	// Watch calls fn for every container start, exit and OOM kill until
	// ctx ends.
	Watch(ctx context.Context, fn func(runtime.Event)) error
	Exec(ctx context.Context, id string, argv []string, timeout time.Duration) (runtime.ExecResult, error)
}

// Network attaches pod sandboxes to the pod network.
type Network interface {
	// Setup attaches the pod; with at.IP it asks for that address.
	Setup(ctx context.Context, podID, netnsPath string, at cni.Attach) (net.IP, error)
	Teardown(ctx context.Context, podID, netnsPath string) error
}

// Images makes images present on the device.
type Images interface {
	// Present returns the image when it is already present and unpacked.
	Present(ctx context.Context, ref registry.Reference) (registry.Pulled, bool, error)
	// Pull makes the image present, verifying it where a policy says so;
	// registry.WithKeychain passes the pod's image pull secrets.
	Pull(ctx context.Context, image string, opts ...registry.PullOption) (registry.Pulled, error)
	// Reverify checks a present image against the trusted keys again
	// (a cached verdict, until the keys change).
	Reverify(ctx context.Context, pulled registry.Pulled, opts ...registry.PullOption) error
}

var (
	_ Runtime = (*runtime.Runtime)(nil)
	_ Network = (*cni.Network)(nil)
	_ Images  = (*registry.Puller)(nil)
)
