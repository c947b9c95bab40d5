package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
)

// Labels on every container Flotilla creates.
const (
	LabelPodUID        = "flotilla.dev/pod-uid"
	LabelPodNamespace  = "flotilla.dev/pod-namespace"
	LabelPodName       = "flotilla.dev/pod-name"
	LabelContainerName = "flotilla.dev/container-name"
	LabelAttempt       = "flotilla.dev/attempt"

	// State the runtime keeps on the container record.
	labelImage      = "flotilla.dev/image"
	labelLogPath    = "flotilla.dev/log-path"
	labelStopSignal = "flotilla.dev/stop-signal"
	labelStartedAt  = "flotilla.dev/started-at"
	labelFinishedAt = "flotilla.dev/finished-at"
	labelExitCode   = "flotilla.dev/exit-code"
	labelOOMKilled  = "flotilla.dev/oom-killed"
	// How the process was started: "true" when set (see ContainerConfig).
	labelStdin       = "flotilla.dev/stdin"
	labelStdinOnce   = "flotilla.dev/stdin-once"
	labelTTY         = "flotilla.dev/tty"
	labelStdinClosed = "flotilla.dev/stdin-closed"
)

// Defaults from Flotilla's contracts.
const (
	DefaultNamespace   = "flotilla"
	DefaultSocket      = "/run/containerd/containerd.sock"
	DefaultLogDir      = "/var/log/flotilla/pods"
	DefaultRuntime     = "io.containerd.runc.v2"
	DefaultSnapshotter = "overlayfs"
	LoggerBinary       = "flotilla-logger"
)

var (
	// ErrNotFound is returned for an unknown sandbox or container.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists is returned when creating a container that exists.
	ErrAlreadyExists = errors.New("already exists")
	// ErrImageNotPresent is returned when a container's image is not pulled.
	ErrImageNotPresent = errors.New("image is not present")
	// ErrInvalid is returned for a configuration that cannot work.
	ErrInvalid = errors.New("invalid runtime configuration")
	// ErrExecTimeout is returned when an exec outlives its timeout.
	ErrExecTimeout = errors.New("exec timed out")
)

// Config configures a Runtime.
type Config struct {
	// Client is a connected containerd client (required).
	Client *containerd.Client
	// Namespace is the containerd namespace; DefaultNamespace when empty.
	Namespace string
	// RunDir holds sandboxes; /run/flotilla/<namespace> when empty.
	RunDir string
	// LogDir holds container logs; DefaultLogDir when empty.
	LogDir string
	// LoggerPath is the flotilla-logger binary; looked up next to this
	// executable, then in PATH, when empty.
	LoggerPath string
	// LogMaxSize (bytes) and LogMaxFiles bound each container's logs.
	LogMaxSize  int64
	LogMaxFiles int
	// ResolvConf is copied into pods that bring no DNS config;
	// /etc/resolv.conf when empty.
	ResolvConf string
	// Snapshotter and Runtime default to overlayfs and runc v2.
	Snapshotter string
	Runtime     string
}

// Runtime runs pods' sandboxes and containers in one containerd namespace.
type Runtime struct {
	client *containerd.Client
	cfg    Config

	reapMu sync.Mutex // one recorder of a container's exit at a time
	sbMu   sync.Mutex // sandbox metadata writes

	// ownsIO: this runtime reads interactive containers' output (New's,
	// not Open's, which only cleans up).
	ownsIO bool
	ioMu   sync.Mutex
	// reattachMu: one reattach at a time, so FIFOs are opened once.
	reattachMu sync.Mutex
	ios        map[string]*attachIO // interactive containers' IO, by container ID
}

// New checks the configuration and returns a Runtime.
func New(cfg Config) (*Runtime, error) {
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
	if cfg.ResolvConf == "" {
		cfg.ResolvConf = "/etc/resolv.conf"
	}
	if cfg.Snapshotter == "" {
		cfg.Snapshotter = DefaultSnapshotter
	}
	if cfg.Runtime == "" {
		cfg.Runtime = DefaultRuntime
	}
	if cfg.LoggerPath == "" {
		p, err := findLogger()
		if err != nil {
			return nil, err
		}
		cfg.LoggerPath = p
	}
	if !filepath.IsAbs(cfg.LoggerPath) {
		return nil, fmt.Errorf("%w: logger path %q must be absolute (the containerd shim runs it)", ErrInvalid, cfg.LoggerPath)
	}
	if st, err := os.Stat(cfg.LoggerPath); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("%w: logger %s is not an executable file: %v", ErrInvalid, cfg.LoggerPath, err)
	}
	for _, d := range []string{cfg.RunDir, cfg.LogDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("runtime: %w", err)
		}
	}
	return &Runtime{client: cfg.Client, cfg: cfg, ios: map[string]*attachIO{}, ownsIO: true}, nil
}

func findLogger() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), LoggerBinary)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(LoggerBinary)
	if err != nil {
		return "", fmt.Errorf("%w: %s not found next to the agent or in PATH; install it with the agent", ErrInvalid, LoggerBinary)
	}
	return filepath.Abs(p)
}

// Namespace is the containerd namespace this runtime uses.
func (r *Runtime) Namespace() string { return r.cfg.Namespace }

// Client is the containerd client.
func (r *Runtime) Client() *containerd.Client { return r.client }

func (r *Runtime) ctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, r.cfg.Namespace)
}
