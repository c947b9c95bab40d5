package runtime

import (
	"context"
	"fmt"
	"path/filepath"

	containerd "github.com/containerd/containerd/v2/client"

	"flotilla.dev/flotilla/agent/runtime/purge"
)

// Open returns a Runtime over the sandboxes and containers that exist, to
// list, stop and remove them (flotilla-agent cleanup). Unlike New it needs
// no logger and creates no directories, so it works on a device where the
// agent is not installed completely; it cannot start containers.
func Open(cfg Config) (*Runtime, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: no containerd client", ErrInvalid)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.RunDir == "" {
		cfg.RunDir = filepath.Join("/run/flotilla", cfg.Namespace)
	}
	if cfg.LogDir == "" {
		cfg.LogDir = DefaultLogDir
	}
	if cfg.Snapshotter == "" {
		cfg.Snapshotter = DefaultSnapshotter
	}
	if cfg.Runtime == "" {
		cfg.Runtime = DefaultRuntime
	}
	return &Runtime{client: cfg.Client, cfg: cfg, ios: map[string]*attachIO{}}, nil
}

// RunDir is the directory holding the sandboxes.
func (r *Runtime) RunDir() string { return r.cfg.RunDir }

// LogDir is the directory holding the pods' logs.
func (r *Runtime) LogDir() string { return r.cfg.LogDir }

// DeleteNamespace removes the containerd namespace ns with everything in
// it (see package purge).
func DeleteNamespace(ctx context.Context, client *containerd.Client, ns string) error {
	return purge.DeleteNamespace(ctx, client, ns)
}
