package runtime

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Mount is a volume in a container.
type Mount struct {
	// Source is a host path for binds; ignored for tmpfs.
	Source      string
	Destination string
	ReadOnly    bool
	// Type is "bind" (the default) or "tmpfs".
	Type string
	// Options are extra mount options, e.g. "size=64m" for tmpfs.
	Options []string
}

// User is the identity a container's process runs as.
type User struct {
	UID            uint32
	GID            uint32
	AdditionalGIDs []uint32
}

// ContainerConfig is what the kubelet decided a container should be.
type ContainerConfig struct {
	Pod     PodRef
	Name    string
	Attempt uint32
	// Image is the containerd image name (registry.Pulled.Image.Name()).
	Image string
	// Args is the full argv; when empty the image's entrypoint and cmd.
	Args []string
	// Env is added over the image's environment ("K=V").
	Env []string
	// WorkingDir overrides the image's.
	WorkingDir string
	Mounts     []Mount
	// User overrides the image's user when set.
	User *User
	// MemoryLimit in bytes; 0 means none.
	MemoryLimit int64
	// CPUQuota and CPUPeriod in microseconds (CFS); 0 means none.
	CPUQuota  int64
	CPUPeriod uint64
	// CPUShares is the relative weight; 0 leaves the default.
	CPUShares       uint64
	ReadOnlyRootfs  bool
	Privileged      bool
	CapAdd, CapDrop []string
	NoNewPrivileges bool
	// StopSignal overrides the image's (default SIGTERM).
	StopSignal string
	// Sandbox is the pod's sandbox; the container joins its namespaces.
	Sandbox *Sandbox
	// Labels are added to the container's labels.
	Labels map[string]string
	// Stdin gives the process a stdin that attach sessions write to;
	// StdinOnce closes it when the first such session ends; TTY gives it
	// a terminal (the pod spec's stdin, stdinOnce and tty). Such a
	// container's output goes through the runtime, not the shim's logger
	// (see the package doc).
	Stdin, StdinOnce, TTY bool
}

// Validate reports what would make the container impossible to create.
func (c ContainerConfig) Validate() error {
	var problems []string
	if c.Pod.UID == "" || c.Pod.Name == "" || c.Pod.Namespace == "" {
		problems = append(problems, "pod uid, namespace and name are required")
	}
	if c.Name == "" || !idPattern.MatchString(c.Name) {
		problems = append(problems, fmt.Sprintf("container name %q is not a valid name", c.Name))
	}
	if c.Image == "" {
		problems = append(problems, "image is required")
	}
	if c.Sandbox == nil {
		problems = append(problems, "sandbox is required")
	}
	for _, m := range c.Mounts {
		if !path.IsAbs(m.Destination) {
			problems = append(problems, fmt.Sprintf("mount destination %q must be absolute", m.Destination))
		}
		switch m.Type {
		case "", "bind":
			if !path.IsAbs(m.Source) {
				problems = append(problems, fmt.Sprintf("bind mount source %q must be absolute", m.Source))
			}
		case "tmpfs":
		default:
			problems = append(problems, fmt.Sprintf("mount type %q: want bind or tmpfs", m.Type))
		}
	}
	if c.CPUQuota < 0 || c.MemoryLimit < 0 {
		problems = append(problems, "cpu quota and memory limit must not be negative")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: container %s of pod %s: %s", ErrInvalid, c.Name, c.Pod, strings.Join(problems, "; "))
	}
	return nil
}

// specOpts turns the config into OCI spec changes, applied after the
// image's config. Pure, so it is unit-tested without containerd.
func specOpts(c ContainerConfig, cgroupsPath string) []oci.SpecOpts {
	opts := []oci.SpecOpts{oci.WithCgroup(cgroupsPath)}
	if len(c.Args) > 0 {
		opts = append(opts, oci.WithProcessArgs(c.Args...))
	}
	if len(c.Env) > 0 {
		opts = append(opts, oci.WithEnv(c.Env))
	}
	if c.WorkingDir != "" {
		opts = append(opts, oci.WithProcessCwd(c.WorkingDir))
	}
	if c.TTY {
		opts = append(opts, oci.WithTTY)
	}
	if c.User != nil {
		u := *c.User
		opts = append(opts, func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
			s.Process.User = specs.User{UID: u.UID, GID: u.GID, AdditionalGids: u.AdditionalGIDs}
			return nil
		})
	}

	sb := c.Sandbox
	if sb != nil {
		if sb.HostNetwork {
			opts = append(opts, oci.WithHostNamespace(specs.NetworkNamespace))
		} else {
			opts = append(opts, oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: sb.NetNS()}))
		}
		opts = append(opts,
			oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.IPCNamespace, Path: sb.IPCNS()}),
			oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.UTSNamespace, Path: sb.UTSNS()}),
			withSandboxFiles(sb),
		)
	}
	opts = append(opts, withMounts(c.Mounts))

	if c.MemoryLimit > 0 {
		opts = append(opts, oci.WithMemoryLimit(uint64(c.MemoryLimit)))
	}
	if c.CPUQuota > 0 {
		period := c.CPUPeriod
		if period == 0 {
			period = 100000
		}
		opts = append(opts, oci.WithCPUCFS(c.CPUQuota, period))
	}
	if c.CPUShares > 0 {
		opts = append(opts, oci.WithCPUShares(c.CPUShares))
	}
	if c.ReadOnlyRootfs {
		opts = append(opts, oci.WithRootFSReadonly())
	}
	if c.Privileged {
		opts = append(opts,
			oci.WithPrivileged,
			oci.WithAllDevicesAllowed,
			oci.WithHostDevices,
			oci.WithMaskedPaths(nil),
			oci.WithReadonlyPaths(nil),
			oci.WithWriteableSysfs,
			oci.WithWriteableCgroupfs,
		)
	} else {
		opts = append(opts, withCapabilities(c.CapAdd, c.CapDrop))
	}
	nnp := c.NoNewPrivileges
	opts = append(opts, func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Process.NoNewPrivileges = nnp
		return nil
	})
	return opts
}

// withSandboxFiles shares the pod's /dev/shm and /etc files.
func withSandboxFiles(sb *Sandbox) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		mounts := s.Mounts[:0]
		for _, m := range s.Mounts {
			if m.Destination != "/dev/shm" {
				mounts = append(mounts, m)
			}
		}
		s.Mounts = append(mounts,
			specs.Mount{Destination: "/dev/shm", Source: sb.ShmPath(), Type: "bind", Options: []string{"rbind", "rprivate", "rw", "nosuid", "nodev", "noexec"}},
			specs.Mount{Destination: "/etc/hosts", Source: sb.HostsPath(), Type: "bind", Options: []string{"rbind", "rprivate", "rw"}},
			specs.Mount{Destination: "/etc/hostname", Source: sb.HostnamePath(), Type: "bind", Options: []string{"rbind", "rprivate", "rw"}},
			specs.Mount{Destination: "/etc/resolv.conf", Source: sb.ResolvConfPath(), Type: "bind", Options: []string{"rbind", "rprivate", "rw"}},
		)
		return nil
	}
}

func withMounts(ms []Mount) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		for _, m := range ms {
			// A volume replaces whatever the defaults mount there.
			kept := s.Mounts[:0]
			for _, x := range s.Mounts {
				if path.Clean(x.Destination) != path.Clean(m.Destination) {
					kept = append(kept, x)
				}
			}
			s.Mounts = kept
			rw := "rw"
			if m.ReadOnly {
				rw = "ro"
			}
			switch m.Type {
			case "tmpfs":
				s.Mounts = append(s.Mounts, specs.Mount{Destination: m.Destination, Source: "tmpfs", Type: "tmpfs",
					Options: append([]string{"nosuid", "nodev", rw}, m.Options...)})
			default:
				s.Mounts = append(s.Mounts, specs.Mount{Destination: m.Destination, Source: m.Source, Type: "bind",
					Options: append([]string{"rbind", "rprivate", rw}, m.Options...)})
			}
		}
		return nil
	}
}

// normCap turns "net_admin" or "NET_ADMIN" into "CAP_NET_ADMIN".
func normCap(c string) string {
	c = strings.ToUpper(c)
	if c == "ALL" || strings.HasPrefix(c, "CAP_") {
		return c
	}
	return "CAP_" + c
}

// withCapabilities applies Kubernetes' rule: drop first (ALL empties the
// set), then add (ALL grants every capability).
func withCapabilities(add, drop []string) oci.SpecOpts {
	return func(ctx context.Context, cl oci.Client, c *containers.Container, s *oci.Spec) error {
		if len(add) == 0 && len(drop) == 0 {
			return nil
		}
		current := map[string]bool{}
		if s.Process.Capabilities != nil {
			for _, c := range s.Process.Capabilities.Bounding {
				current[c] = true
			}
		}
		for _, d := range drop {
			if d = normCap(d); d == "ALL" {
				current = map[string]bool{}
			} else {
				delete(current, d)
			}
		}
		for _, a := range add {
			if a = normCap(a); a == "ALL" {
				for _, c := range allCaps() {
					current[c] = true
				}
			} else {
				current[a] = true
			}
		}
		list := make([]string, 0, len(current))
		for c := range current {
			list = append(list, c)
		}
		sortStrings(list)
		return oci.WithCapabilities(list)(ctx, cl, c, s)
	}
}

func allCaps() []string {
	var caps []string
	s := &oci.Spec{Process: &specs.Process{}}
	oci.WithPrivileged(context.Background(), nil, nil, s)
	if s.Process.Capabilities != nil {
		caps = s.Process.Capabilities.Bounding
	}
	return caps
}

func sortStrings(s []string) { sort.Strings(s) }
