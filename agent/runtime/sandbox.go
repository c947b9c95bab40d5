package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"flotilla.dev/flotilla/agent/runtime/podns"
	"flotilla.dev/flotilla/internal/atomicfile"
)

// PodRef identifies the pod a sandbox or container belongs to.
type PodRef struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (p PodRef) String() string { return p.Namespace + "/" + p.Name + " (" + p.UID + ")" }

// DNSConfig is written to the pod's resolv.conf.
type DNSConfig struct {
	Servers  []string `json:"servers,omitempty"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// SandboxConfig describes a pod's sandbox.
type SandboxConfig struct {
	Pod PodRef
	// Hostname is set in the pod's UTS namespace (the pod name, usually).
	Hostname string
	// HostNetwork pods use the host's network namespace.
	HostNetwork bool
	// DNS, when nil, copies the runtime's ResolvConf.
	DNS *DNSConfig
	// ShmSize bounds /dev/shm; 64 MiB when zero.
	ShmSize int64
	// Labels are kept with the sandbox.
	Labels map[string]string
}

// Sandbox is a pod's shared namespaces and files.
type Sandbox struct {
	ID          string            `json:"id"`
	Pod         PodRef            `json:"pod"`
	Hostname    string            `json:"hostname"`
	HostNetwork bool              `json:"hostNetwork,omitempty"`
	IP          string            `json:"ip,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	CreatedAt   time.Time         `json:"createdAt"`

	// Dir is the sandbox directory; the paths below are inside it.
	Dir string `json:"-"`
}

// NetNS is the network namespace path ("" for host network).
func (s *Sandbox) NetNS() string {
	if s.HostNetwork {
		return ""
	}
	return filepath.Join(s.Dir, "net")
}
func (s *Sandbox) IPCNS() string          { return filepath.Join(s.Dir, "ipc") }
func (s *Sandbox) UTSNS() string          { return filepath.Join(s.Dir, "uts") }
func (s *Sandbox) ShmPath() string        { return filepath.Join(s.Dir, "shm") }
func (s *Sandbox) HostsPath() string      { return filepath.Join(s.Dir, "hosts") }
func (s *Sandbox) HostnamePath() string   { return filepath.Join(s.Dir, "hostname") }
func (s *Sandbox) ResolvConfPath() string { return filepath.Join(s.Dir, "resolv.conf") }

// Ready reports whether the sandbox's namespaces are alive (false after a
// reboot left only files, or when creation was interrupted).
func (s *Sandbox) Ready() bool {
	if !s.HostNetwork && !podns.IsNamespace(s.NetNS()) {
		return false
	}
	return podns.IsNamespace(s.IPCNS()) && podns.IsNamespace(s.UTSNS())
}

const sandboxFile = "sandbox.json"

// idPattern keeps sandbox IDs safe as path components.
var idPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$`)

func (r *Runtime) sandboxDir(id string) string {
	return filepath.Join(r.cfg.RunDir, "sandboxes", id)
}

// CreateSandbox creates the pod's sandbox; its ID is the pod UID. If a
// ready sandbox for the pod exists it is returned as is, so a
// level-triggered caller can simply call it again. A half-made one (after
// a crash or a reboot) is removed and made again.
func (r *Runtime) CreateSandbox(ctx context.Context, cfg SandboxConfig) (*Sandbox, error) {
	id := cfg.Pod.UID
	if !idPattern.MatchString(id) {
		return nil, fmt.Errorf("%w: pod UID %q is not usable as a sandbox ID", ErrInvalid, id)
	}
	if sb, err := r.GetSandbox(ctx, id); err == nil {
		if sb.Ready() {
			return sb, nil
		}
		if err := r.RemoveSandbox(ctx, id); err != nil {
			return nil, err
		}
	}
	sb := &Sandbox{
		ID: id, Pod: cfg.Pod, Hostname: cfg.Hostname, HostNetwork: cfg.HostNetwork,
		Labels: cfg.Labels, CreatedAt: time.Now().UTC(), Dir: r.sandboxDir(id),
	}
	if err := r.makeSandbox(sb, cfg); err != nil {
		r.RemoveSandbox(ctx, id)
		return nil, fmt.Errorf("create sandbox for pod %s: %w", cfg.Pod, err)
	}
	return sb, nil
}

func (r *Runtime) makeSandbox(sb *Sandbox, cfg SandboxConfig) error {
	if err := os.MkdirAll(sb.Dir, 0o711); err != nil {
		return err
	}
	specs := []podns.Spec{{Kind: podns.IPC, Path: sb.IPCNS()}, {Kind: podns.UTS, Path: sb.UTSNS()}}
	if !sb.HostNetwork {
		specs = append(specs, podns.Spec{Kind: podns.Net, Path: sb.NetNS()})
	}
	hostname := sb.Hostname
	if sb.HostNetwork {
		// A host-network pod sees the host's name, as in Kubernetes.
		hostname, _ = os.Hostname()
		sb.Hostname = hostname
	}
	if err := podns.Create(hostname, specs...); err != nil {
		return err
	}
	shm := cfg.ShmSize
	if shm <= 0 {
		shm = 64 << 20
	}
	if err := os.Mkdir(sb.ShmPath(), 0o1777); err != nil {
		return err
	}
	if err := unix.Mount("shm", sb.ShmPath(), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, fmt.Sprintf("mode=1777,size=%d", shm)); err != nil {
		return fmt.Errorf("mount /dev/shm tmpfs: %w", err)
	}
	if err := os.WriteFile(sb.HostnamePath(), []byte(sb.Hostname+"\n"), 0o644); err != nil {
		return err
	}
	if err := r.writeHosts(sb); err != nil {
		return err
	}
	resolv, err := r.resolvConf(cfg.DNS)
	if err != nil {
		return err
	}
	if err := os.WriteFile(sb.ResolvConfPath(), resolv, 0o644); err != nil {
		return err
	}
	return r.saveSandbox(sb)
}

func (r *Runtime) resolvConf(dns *DNSConfig) ([]byte, error) {
	if dns == nil {
		b, err := os.ReadFile(r.cfg.ResolvConf)
		if err != nil {
			return nil, fmt.Errorf("read %s for the pod's DNS: %w", r.cfg.ResolvConf, err)
		}
		return b, nil
	}
	var b strings.Builder
	for _, s := range dns.Servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	if len(dns.Searches) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(dns.Searches, " "))
	}
	if len(dns.Options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(dns.Options, " "))
	}
	return []byte(b.String()), nil
}

func (r *Runtime) writeHosts(sb *Sandbox) error {
	if sb.HostNetwork {
		b, err := os.ReadFile("/etc/hosts")
		if err != nil {
			return err
		}
		return atomicfile.Write(sb.HostsPath(), b, 0o644)
	}
	var b strings.Builder
	b.WriteString("# Managed by flotilla: the pod's hosts file.\n")
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n")
	if sb.IP != "" {
		fmt.Fprintf(&b, "%s\t%s\n", sb.IP, sb.Hostname)
	}
	// Rewritten in place (not renamed) so that containers, which have the
	// file bind-mounted, see the change.
	return os.WriteFile(sb.HostsPath(), []byte(b.String()), 0o644)
}

func (r *Runtime) saveSandbox(sb *Sandbox) error {
	b, err := json.MarshalIndent(sb, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(sb.Dir, sandboxFile), b, 0o600)
}

// GetSandbox reads a sandbox; ErrNotFound when there is none.
func (r *Runtime) GetSandbox(_ context.Context, id string) (*Sandbox, error) {
	if !idPattern.MatchString(id) {
		return nil, fmt.Errorf("sandbox %q: %w", id, ErrNotFound)
	}
	dir := r.sandboxDir(id)
	b, err := os.ReadFile(filepath.Join(dir, sandboxFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("sandbox %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	var sb Sandbox
	if err := json.Unmarshal(b, &sb); err != nil {
		return nil, fmt.Errorf("sandbox %s: corrupt %s: %w", id, sandboxFile, err)
	}
	sb.Dir = dir
	return &sb, nil
}

// ListSandboxes returns every sandbox on disk, ready or not.
func (r *Runtime) ListSandboxes(ctx context.Context) ([]*Sandbox, error) {
	ents, err := os.ReadDir(filepath.Join(r.cfg.RunDir, "sandboxes"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*Sandbox
	for _, e := range ents {
		sb, err := r.GetSandbox(ctx, e.Name())
		if errors.Is(err, ErrNotFound) {
			// A directory without metadata: an interrupted creation. It
			// is reported so the caller can remove it.
			out = append(out, &Sandbox{ID: e.Name(), Dir: r.sandboxDir(e.Name())})
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, sb)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// SetSandboxIP records the pod IP (after CNI setup) and adds it to the
// pod's hosts file.
func (r *Runtime) SetSandboxIP(ctx context.Context, id, ip string) error {
	r.sbMu.Lock()
	defer r.sbMu.Unlock()
	sb, err := r.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	sb.IP = ip
	if err := r.writeHosts(sb); err != nil {
		return err
	}
	return r.saveSandbox(sb)
}

// RemoveSandbox removes the namespaces, mounts and files of a sandbox.
// Tear down its network (CNI) and remove its containers first. Removing a
// sandbox that does not exist is not an error.
func (r *Runtime) RemoveSandbox(_ context.Context, id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("%w: sandbox ID %q", ErrInvalid, id)
	}
	dir := r.sandboxDir(id)
	var errs []error
	if err := unix.Unmount(filepath.Join(dir, "shm"), unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("unmount shm: %w", err))
	}
	if err := podns.Remove(filepath.Join(dir, "net"), filepath.Join(dir, "ipc"), filepath.Join(dir, "uts")); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove sandbox %s: %w", id, err)
	}
	return nil
}
