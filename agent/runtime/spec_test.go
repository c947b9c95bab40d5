package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"flotilla.dev/flotilla/internal/testenv"
)

func genSpec(t *testing.T, cfg ContainerConfig) *oci.Spec {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), "test")
	s, err := oci.GenerateSpec(ctx, nil, &containers.Container{ID: "c1"}, specOpts(cfg, "/test/c1")...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mountAt(s *oci.Spec, dst string) *specs.Mount {
	var found *specs.Mount
	for i := range s.Mounts {
		if s.Mounts[i].Destination == dst {
			if found != nil {
				return &specs.Mount{Type: "DUPLICATE"}
			}
			found = &s.Mounts[i]
		}
	}
	return found
}

func TestSpecFromConfig(t *testing.T) {
	sb := &Sandbox{ID: "uid1", Dir: "/run/flotilla/x/sandboxes/uid1"}
	s := genSpec(t, ContainerConfig{
		Args:            []string{"/app", "-v"},
		Env:             []string{"A=1"},
		WorkingDir:      "/work",
		User:            &User{UID: 1000, GID: 2000, AdditionalGIDs: []uint32{3000}},
		MemoryLimit:     20 << 20,
		CPUQuota:        50000,
		CPUShares:       512,
		ReadOnlyRootfs:  true,
		NoNewPrivileges: true,
		CapAdd:          []string{"net_admin"},
		CapDrop:         []string{"CAP_CHOWN"},
		Sandbox:         sb,
		Mounts: []Mount{
			{Source: "/var/lib/vol", Destination: "/data", ReadOnly: true},
			{Destination: "/scratch", Type: "tmpfs", Options: []string{"size=1m"}},
		},
	})
	if strings.Join(s.Process.Args, " ") != "/app -v" || !slices.Contains(s.Process.Env, "A=1") || s.Process.Cwd != "/work" {
		t.Errorf("process = %+v", s.Process)
	}
	if u := s.Process.User; u.UID != 1000 || u.GID != 2000 || !slices.Equal(u.AdditionalGids, []uint32{3000}) {
		t.Errorf("user = %+v", u)
	}
	if s.Linux.CgroupsPath != "/test/c1" {
		t.Errorf("cgroups path = %s", s.Linux.CgroupsPath)
	}
	if *s.Linux.Resources.Memory.Limit != 20<<20 || *s.Linux.Resources.CPU.Quota != 50000 || *s.Linux.Resources.CPU.Period != 100000 || *s.Linux.Resources.CPU.Shares != 512 {
		t.Errorf("resources = %+v", s.Linux.Resources)
	}
	if !s.Root.Readonly || !s.Process.NoNewPrivileges {
		t.Error("read-only rootfs or no-new-privileges not set")
	}
	caps := s.Process.Capabilities.Bounding
	if !slices.Contains(caps, "CAP_NET_ADMIN") || slices.Contains(caps, "CAP_CHOWN") || !slices.Contains(caps, "CAP_KILL") {
		t.Errorf("capabilities = %v", caps)
	}
	ns := map[specs.LinuxNamespaceType]string{}
	for _, n := range s.Linux.Namespaces {
		ns[n.Type] = n.Path
	}
	if ns[specs.NetworkNamespace] != sb.NetNS() || ns[specs.IPCNamespace] != sb.IPCNS() || ns[specs.UTSNamespace] != sb.UTSNS() {
		t.Errorf("namespaces = %v", ns)
	}
	if p, ok := ns[specs.PIDNamespace]; !ok || p != "" {
		t.Errorf("want a private PID namespace, got %q %v", p, ok)
	}
	for dst, src := range map[string]string{"/dev/shm": sb.ShmPath(), "/etc/hosts": sb.HostsPath(), "/etc/resolv.conf": sb.ResolvConfPath(), "/etc/hostname": sb.HostnamePath(), "/data": "/var/lib/vol"} {
		m := mountAt(s, dst)
		if m == nil || m.Source != src {
			t.Errorf("mount %s = %+v, want source %s", dst, m, src)
		}
	}
	if m := mountAt(s, "/data"); !slices.Contains(m.Options, "ro") {
		t.Errorf("/data options = %v", m.Options)
	}
	if m := mountAt(s, "/scratch"); m == nil || m.Type != "tmpfs" || !slices.Contains(m.Options, "size=1m") {
		t.Errorf("/scratch = %+v", m)
	}
}

func TestSpecCapabilityRules(t *testing.T) {
	s := genSpec(t, ContainerConfig{CapDrop: []string{"ALL"}, CapAdd: []string{"NET_BIND_SERVICE"}})
	if got := s.Process.Capabilities.Bounding; !slices.Equal(got, []string{"CAP_NET_BIND_SERVICE"}) {
		t.Errorf("drop ALL add one = %v", got)
	}
	t.Run("privileged", func(t *testing.T) {
		// A privileged container gets the capabilities of the process that
		// makes its spec: none for a user.
		testenv.RequireRoot(t, "a privileged spec has the caller's capabilities")
		s := genSpec(t, ContainerConfig{Privileged: true, CapDrop: []string{"ALL"}})
		if len(s.Process.Capabilities.Bounding) < 30 || mountAt(s, "/dev/shm") == nil {
			t.Errorf("privileged caps = %d", len(s.Process.Capabilities.Bounding))
		}
		if len(s.Linux.MaskedPaths) != 0 {
			t.Errorf("privileged masked paths = %v", s.Linux.MaskedPaths)
		}
	})
	s = genSpec(t, ContainerConfig{Sandbox: &Sandbox{HostNetwork: true, Dir: "/x"}})
	for _, n := range s.Linux.Namespaces {
		if n.Type == specs.NetworkNamespace {
			t.Errorf("host-network container has a network namespace: %+v", n)
		}
	}
}

func TestContainerIDAndValidate(t *testing.T) {
	long := strings.Repeat("n", 63)
	id := ContainerID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", long, 4294967295)
	if len(id) > 76 || !idPattern.MatchString(id) {
		t.Fatalf("id %q (%d chars) is not a containerd ID", id, len(id))
	}
	if id != ContainerID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", long, 4294967295) || id == ContainerID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", long, 0) {
		t.Fatal("ids must be deterministic and differ per attempt")
	}
	err := ContainerConfig{Name: "bad name", Mounts: []Mount{{Source: "rel", Destination: "/x"}, {Destination: "/y", Type: "nfs"}}}.Validate()
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"pod uid", "bad name", "image is required", "sandbox is required", `"rel"`, `"nfs"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

func TestCounter(t *testing.T) {
	dir := t.TempDir()
	old := cgroupRoot
	cgroupRoot = dir
	defer func() { cgroupRoot = old }()
	p := dir + "/memory/ns/c1"
	if err := mkdirWrite(p+"/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"); err != nil {
		t.Fatal(err)
	}
	if !oomKilled("/ns/c1") || oomKilled("/ns/other") {
		t.Error("v1 oom_kill not read")
	}
	if err := mkdirWrite(dir+"/cgroup.controllers", "memory"); err != nil {
		t.Fatal(err)
	}
	if err := mkdirWrite(dir+"/ns/c2/memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n"); err != nil {
		t.Fatal(err)
	}
	if !oomKilled("/ns/c2") {
		t.Error("v2 oom_kill not read")
	}
}

func mkdirWrite(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}
