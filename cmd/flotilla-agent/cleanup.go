package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"github.com/vishvananda/netlink"

	"flotilla.dev/flotilla/agent/agent"
	"flotilla.dev/flotilla/agent/cni"
	"flotilla.dev/flotilla/agent/kubelet/volumes"
	"flotilla.dev/flotilla/agent/proxy"
	"flotilla.dev/flotilla/agent/routes"
	"flotilla.dev/flotilla/agent/runtime"
	"flotilla.dev/flotilla/agent/runtime/podns"
	"flotilla.dev/flotilla/internal/config"
)

// addDeviceFlags defines the flags run and cleanup share: where the agent
// keeps what it makes on the device.
func addDeviceFlags(f *pflag.FlagSet) {
	f.String("config", DefaultConfigFile, "config file (YAML; keys are the flag names; empty for none)")
	f.String("data-dir", agent.DefaultDataDir, "directory for the agent's state (pki/, pods/, pod-cidr)")
	f.String("containerd-address", runtime.DefaultSocket, "containerd's socket")
	f.String("containerd-namespace", runtime.DefaultNamespace, "containerd namespace of the agent's images and containers")
	f.String("cni-conf-dir", cni.DefaultConfDir, "CNI network configuration directory")
	f.StringSlice("cni-bin-dir", cni.DefaultBinDirs, "CNI plugin directories, searched in order")
	f.String("log-dir", runtime.DefaultLogDir, "directory of container logs")
}

// newCleanup removes what the agent made on the device. Run it with the
// agent stopped (a running agent makes it all again).
func newCleanup() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove the agent's iptables chains and pod routes (and with --pods its pods) from this device",
		Long: `Remove what the agent made on this device. Stop the agent first.

Without --pods: every FLOTILLA iptables chain and the jumps to them, and the
pod routes.

With --pods, also, to decommission the device: every container in the
agent's containerd namespace (killed at once, no grace period), every pod
sandbox with its network (CNI), the pods' volumes and logs, the containerd
namespace with its images, snapshots and content, and the bridge and CNI
configuration Flotilla generated (never a bridge or file it did not make).

It reads the same config file and FLOTILLA_<KEY> variables as run. Every
step is tried; the errors are reported together.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := cleanupConfigOf(cmd)
			if err != nil {
				return err
			}
			return cleanupDevice(cmd.Context(), cfg, cmd.OutOrStdout())
		},
	}
	addDeviceFlags(cmd.Flags())
	cmd.Flags().Bool("pods", false, "also remove the pods, their images and network, and the containerd namespace")
	return cmd
}

// cleanupConfig says where the agent's things are.
type cleanupConfig struct {
	// Pods removes the pods and everything made for them, not only the
	// kernel's rules.
	Pods                bool
	DataDir             string
	ContainerdAddress   string
	ContainerdNamespace string
	CNIConfDir          string
	CNIBinDirs          []string
	LogDir              string
	// RunDir and CNICacheDir: the runtime's and CNI's defaults when empty
	// (as in the agent, where only tests set them).
	RunDir      string
	CNICacheDir string
	// NetNSPath is the network namespace of the pod network, the rules and
	// the routes; the current one when empty (tests give a private one).
	NetNSPath string
}

// cleanupConfigOf reads the flags, the environment and the config file.
// The file is the agent's: its keys are checked against run's flags, so
// `cleanup --config /etc/flotilla/agent.yaml` reads the file run reads.
// --pods is taken from the command line only: removing every pod must not
// come from a stray environment variable or config key.
func cleanupConfigOf(cmd *cobra.Command) (cleanupConfig, error) {
	flags := cmd.Flags()
	keys := &cobra.Command{Use: cmd.Use}
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Name != "pods" {
			keys.Flags().AddFlag(f)
		}
	})
	keys.Flags().AddFlagSet(newRun().Flags()) // the keys cleanup has not; its own win
	file, _ := flags.GetString("config")
	v, err := config.Load(keys, file, flags.Changed("config"))
	if err != nil {
		return cleanupConfig{}, err
	}
	pods, _ := flags.GetBool("pods")
	return cleanupConfigFrom(v, pods)
}

func cleanupConfigFrom(v *viper.Viper, pods bool) (cleanupConfig, error) {
	cfg := cleanupConfig{
		Pods:                pods,
		DataDir:             v.GetString("data-dir"),
		ContainerdAddress:   v.GetString("containerd-address"),
		ContainerdNamespace: v.GetString("containerd-namespace"),
		CNIConfDir:          v.GetString("cni-conf-dir"),
		CNIBinDirs:          v.GetStringSlice("cni-bin-dir"),
		LogDir:              v.GetString("log-dir"),
	}
	if cfg.DataDir == "" {
		cfg.DataDir = agent.DefaultDataDir
	}
	if cfg.ContainerdAddress == "" {
		cfg.ContainerdAddress = runtime.DefaultSocket
	}
	if cfg.ContainerdNamespace == "" {
		cfg.ContainerdNamespace = runtime.DefaultNamespace
	}
	if cfg.CNIConfDir == "" {
		cfg.CNIConfDir = cni.DefaultConfDir
	}
	if cfg.LogDir == "" {
		cfg.LogDir = runtime.DefaultLogDir
	}
	var errs []error
	for _, d := range []struct{ flag, path string }{{"--data-dir", cfg.DataDir}, {"--log-dir", cfg.LogDir}, {"--cni-conf-dir", cfg.CNIConfDir}} {
		if !filepath.IsAbs(d.path) {
			errs = append(errs, fmt.Errorf("%s %q must be an absolute path", d.flag, d.path))
		}
	}
	return cfg, errors.Join(errs...)
}

// cleanupDevice removes what cfg says and prints what it removed. Every
// step runs whatever the others did; the errors come back joined.
func cleanupDevice(ctx context.Context, cfg cleanupConfig, out io.Writer) error {
	c := &cleaner{cfg: cfg, out: out}
	if cfg.Pods {
		c.pods(ctx)
	}
	if err := c.inNet(func() error { return errors.Join(proxy.Cleanup(ctx), routes.Cleanup(ctx)) }); err != nil {
		c.fail(err)
	} else {
		fmt.Fprintln(out, "removed Flotilla's iptables chains and pod routes")
	}
	return errors.Join(c.errs...)
}

type cleaner struct {
	cfg  cleanupConfig
	out  io.Writer
	errs []error
}

func (c *cleaner) removed(format string, args ...any) {
	fmt.Fprintf(c.out, "removed "+format+"\n", args...)
}

func (c *cleaner) fail(err error) {
	if err != nil {
		c.errs = append(c.errs, err)
	}
}

// inNet runs fn in the pod network's namespace.
func (c *cleaner) inNet(fn func() error) error {
	if c.cfg.NetNSPath == "" {
		return fn()
	}
	return podns.Do(c.cfg.NetNSPath, fn)
}

// pods removes, in the kubelet's order, the containers, then the
// sandboxes with their network, then what is left of the pods on disk,
// then the containerd namespace, then the pod network itself.
func (c *cleaner) pods(ctx context.Context) {
	client, err := containerd.New(c.cfg.ContainerdAddress)
	if err != nil {
		c.fail(fmt.Errorf("containerd at %s: %w", c.cfg.ContainerdAddress, err))
		return
	}
	defer client.Close()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	serving, err := client.IsServing(sctx)
	cancel()
	if !serving {
		c.fail(fmt.Errorf("containerd at %s does not answer (%v): the containers and the containerd namespace %s are left; start containerd and run cleanup again",
			c.cfg.ContainerdAddress, err, c.cfg.ContainerdNamespace))
	}
	rt, err := runtime.Open(runtime.Config{
		Client: client, Namespace: c.cfg.ContainerdNamespace, RunDir: c.cfg.RunDir, LogDir: c.cfg.LogDir,
	})
	if err != nil {
		c.fail(err)
		return
	}
	pods := map[string]runtime.PodRef{}
	if serving {
		c.containers(ctx, rt, pods)
	}
	c.sandboxes(ctx, rt, pods)
	c.logs(rt, pods)
	c.volumes()
	if serving {
		c.namespace(ctx, client)
	}
	c.network()
}

// containers kills and removes every container of the agent; removal
// kills with SIGKILL and waits (the operator asked for removal: no grace).
func (c *cleaner) containers(ctx context.Context, rt *runtime.Runtime, pods map[string]runtime.PodRef) {
	cs, err := rt.ListContainers(ctx, runtime.ListFilter{})
	if err != nil {
		c.fail(fmt.Errorf("listing the containers: %w", err))
		return
	}
	for _, ctr := range cs {
		pods[ctr.Pod.UID] = ctr.Pod
		if err := rt.RemoveContainer(ctx, ctr.ID); err != nil {
			c.fail(err)
			continue
		}
		c.removed("container %s (attempt %d) of pod %s", ctr.Name, ctr.Attempt, ctr.Pod)
	}
}

// sandboxes tears down every sandbox's network and removes it.
func (c *cleaner) sandboxes(ctx context.Context, rt *runtime.Runtime, pods map[string]runtime.PodRef) {
	sbs, err := rt.ListSandboxes(ctx)
	if err != nil {
		c.fail(fmt.Errorf("listing the sandboxes: %w", err))
	}
	var network *cni.Network
	var netErr error
	for _, sb := range sbs {
		what := "sandbox " + sb.ID
		if sb.Pod.UID != "" {
			pods[sb.Pod.UID] = sb.Pod
			what = "sandbox of pod " + sb.Pod.String()
		}
		if sb.NetNS() != "" {
			if network == nil && netErr == nil {
				if network, netErr = c.cniNetwork(); netErr != nil {
					c.fail(fmt.Errorf("the pods' networks are not torn down: %w", netErr))
				}
			}
			if network != nil {
				// A netns already gone is fine: the plugins then release
				// the host's side (IPAM, port mappings) only.
				if err := c.inNet(func() error { return network.Teardown(ctx, sb.ID, sb.NetNS()) }); err != nil {
					c.fail(err)
				}
			}
		}
		if err := rt.RemoveSandbox(ctx, sb.ID); err != nil {
			c.fail(err)
			continue
		}
		c.removed("%s", what)
	}
	removeIfEmpty(filepath.Join(rt.RunDir(), "sandboxes"))
	removeIfEmpty(rt.RunDir())
}

// cniNetwork is the agent's pod network as its CNI configuration
// describes it. Flotilla's generated conflist is read back so that the
// network is the same (its IPAM dir, bridge, pod CIDR) and the file stays
// as it is; without it, the pod CIDR the agent recorded is used.
func (c *cleaner) cniNetwork() (*cni.Network, error) {
	cfg := cni.Config{ConfDir: c.cfg.CNIConfDir, BinDirs: c.cfg.CNIBinDirs, CacheDir: c.cfg.CNICacheDir}
	gen, err := cni.ReadGenerated(filepath.Join(c.cfg.CNIConfDir, cni.DefaultConfFile))
	if err != nil {
		return nil, err
	}
	if gen != nil {
		cfg.PodCIDR, cfg.NetworkName, cfg.BridgeName, cfg.IPAMDataDir = gen.PodCIDR, gen.NetworkName, gen.BridgeName, gen.IPAMDataDir
	} else if b, err := os.ReadFile(filepath.Join(c.cfg.DataDir, "pod-cidr")); err == nil {
		cfg.PodCIDR = strings.TrimSpace(string(b))
	}
	n, err := cni.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("the CNI configuration in %s: %w", c.cfg.CNIConfDir, err)
	}
	return n, nil
}

// logs removes the logs of the pods found.
func (c *cleaner) logs(rt *runtime.Runtime, pods map[string]runtime.PodRef) {
	for _, p := range pods {
		if p.UID == "" || p.Namespace == "" || p.Name == "" {
			continue
		}
		if _, err := os.Stat(rt.PodLogDir(p)); err != nil {
			continue
		}
		if err := rt.RemovePodLogs(p); err != nil {
			c.fail(fmt.Errorf("removing the logs of pod %s: %w", p, err))
			continue
		}
		c.removed("logs of pod %s", p)
	}
	removeIfEmpty(rt.LogDir())
}

// volumes removes every pod's volumes (unmounting their tmpfs first).
func (c *cleaner) volumes() {
	root := filepath.Join(c.cfg.DataDir, "pods")
	if _, err := os.Stat(root); err != nil {
		return
	}
	m, err := volumes.New(root, nil)
	if err != nil {
		c.fail(err)
		return
	}
	uids, err := m.PodUIDs()
	if err != nil {
		c.fail(fmt.Errorf("listing the pods' volumes: %w", err))
		return
	}
	for _, uid := range uids {
		if err := m.TearDown(uid); err != nil {
			c.fail(err)
			continue
		}
		c.removed("volumes of pod %s", uid)
	}
	removeIfEmpty(root)
}

// namespace deletes the agent's containerd namespace with everything in
// it, unless it holds containers Flotilla did not make: then the
// namespace is someone else's too (a wrong --containerd-namespace).
func (c *cleaner) namespace(ctx context.Context, client *containerd.Client) {
	ns := c.cfg.ContainerdNamespace
	all, err := client.NamespaceService().List(ctx)
	if err != nil {
		c.fail(fmt.Errorf("listing containerd namespaces: %w", err))
		return
	}
	found := false
	for _, n := range all {
		found = found || n == ns
	}
	if !found {
		return
	}
	nctx := namespaces.WithNamespace(ctx, ns)
	left, err := client.Containers(nctx)
	if err != nil {
		c.fail(fmt.Errorf("listing the containers left in containerd namespace %s: %w", ns, err))
		return
	}
	var foreign []string
	for _, ctr := range left {
		labels, err := ctr.Labels(nctx)
		if err == nil && labels[runtime.LabelPodUID] == "" {
			foreign = append(foreign, ctr.ID())
		}
	}
	if len(foreign) > 0 {
		c.fail(fmt.Errorf("containerd namespace %s holds containers Flotilla did not make (%s), so it is not deleted; check --containerd-namespace",
			ns, strings.Join(foreign, ", ")))
		return
	}
	if err := runtime.DeleteNamespace(ctx, client, ns); err != nil {
		c.fail(fmt.Errorf("deleting containerd namespace %s: %w", ns, err))
		return
	}
	c.removed("containerd namespace %s with its images, snapshots and content", ns)
}

// network removes what Flotilla's generated conflist made: its bridge,
// the IPAM state of its pod CIDR, and the file. The file goes last, and
// stays when the bridge could not be removed, so that running cleanup
// again still knows the bridge is Flotilla's.
func (c *cleaner) network() {
	path := filepath.Join(c.cfg.CNIConfDir, cni.DefaultConfFile)
	gen, err := cni.ReadGenerated(path)
	if err != nil {
		c.fail(err)
		return
	}
	if gen == nil {
		return
	}
	var bridgeErr error
	if gen.BridgeName != "" {
		var gone bool
		bridgeErr = c.inNet(func() error {
			var err error
			gone, err = removeBridge(gen.BridgeName)
			return err
		})
		c.fail(bridgeErr)
		if gone {
			c.removed("bridge %s", gen.BridgeName)
		}
	}
	if dir, err := pruneIPAM(gen); err != nil {
		c.fail(err)
	} else if dir != "" {
		c.removed("IPAM state %s", dir)
	}
	if bridgeErr != nil {
		return
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.fail(fmt.Errorf("removing the CNI configuration: %w", err))
		return
	}
	c.removed("CNI configuration %s", path)
}

// removeBridge deletes the bridge name when it is one and no interface is
// attached to it any more; gone is false when there was none.
func removeBridge(name string) (gone bool, err error) {
	l, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("looking up bridge %s: %w", name, err)
	}
	if l.Type() != "bridge" {
		return false, fmt.Errorf("%s is a %s link, not the bridge Flotilla's CNI configuration makes; not removed", name, l.Type())
	}
	links, err := netlink.LinkList()
	if err != nil {
		return false, fmt.Errorf("listing links: %w", err)
	}
	var ports []string
	for _, p := range links {
		if p.Attrs().MasterIndex == l.Attrs().Index {
			ports = append(ports, p.Attrs().Name)
		}
	}
	if len(ports) > 0 {
		return false, fmt.Errorf("bridge %s still has interfaces attached (%s), pods that cleanup did not find; not removed",
			name, strings.Join(ports, ", "))
	}
	if err := netlink.LinkDel(l); err != nil {
		return false, fmt.Errorf("removing bridge %s: %w", name, err)
	}
	return true, nil
}

// pruneIPAM removes the host-local IPAM reservations of the pod CIDR that
// teardown left, and the network's IPAM directory when nothing else is
// in it: other devices sharing the directory (one per pod CIDR) keep
// theirs. It returns the directory when it removed it.
func pruneIPAM(gen *cni.Config) (string, error) {
	dir := filepath.Join(gen.IPAMDataDir, gen.NetworkName)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the IPAM state: %w", err)
	}
	_, subnet, _ := net.ParseCIDR(gen.PodCIDR)
	var errs []error
	others := 0
	for _, e := range ents {
		name := e.Name()
		switch ip := net.ParseIP(name); {
		case ip != nil && subnet != nil && subnet.Contains(ip):
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("releasing %s: %w", name, err))
			}
		case name == "lock" || strings.HasPrefix(name, "last_reserved_ip"):
		default:
			others++
		}
	}
	if err := errors.Join(errs...); err != nil || others > 0 {
		return "", err
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("removing the IPAM state: %w", err)
	}
	return dir, nil
}

// removeIfEmpty removes a directory the agent made once nothing of it is
// left; one still in use stays.
func removeIfEmpty(dir string) {
	os.Remove(dir)
}
