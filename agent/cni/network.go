package cni

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"golang.org/x/sys/unix"
)

// ErrNoNetNS is returned by Setup when the pod's network namespace is gone.
var ErrNoNetNS = errors.New("pod network namespace does not exist")

// PortMapping is a hostPort, in the portmap plugin's terms.
type PortMapping struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"` // "tcp", "udp" or "sctp"
	HostIP        string `json:"hostIP,omitempty"`
}

// loopbackConf is attached to every pod for "lo", as container runtimes
// do: the network's own plugins only bring up the pod's interface.
var loopbackConf = []byte(`{"cniVersion":"` + CNIVersion + `","name":"cni-loopback","plugins":[{"type":"loopback"}]}`)

// Network attaches pods to the node's network.
type Network struct {
	cfg      Config
	cni      *libcni.CNIConfig
	list     *libcni.NetworkConfigList
	loopback *libcni.NetworkConfigList
	file     string

	mu sync.Mutex // serialises ADD/DEL: host-local and iptables prefer it
}

// New writes the default network if the conf dir has none (PodCIDR is
// needed then) and loads the network the conf dir names first.
func New(cfg Config) (*Network, error) {
	cfg = cfg.withDefaults()
	file, _, err := EnsureDefaultConfig(cfg)
	if err != nil {
		return nil, err
	}
	list, err := loadConfList(file)
	if err != nil {
		return nil, err
	}
	lo, err := libcni.ConfListFromBytes(loopbackConf)
	if err != nil {
		return nil, err
	}
	return &Network{
		cfg:      cfg,
		cni:      libcni.NewCNIConfigWithCacheDir(cfg.BinDirs, cfg.CacheDir, nil),
		list:     list,
		loopback: lo,
		file:     file,
	}, nil
}

// Name is the network's name; ConfFile where it was read from.
func (n *Network) Name() string     { return n.list.Name }
func (n *Network) ConfFile() string { return n.file }

// Attach says how a pod is attached beyond its namespace.
type Attach struct {
	// Ports are the pod's host ports.
	Ports []PortMapping
	// IP asks the IPAM plugin for this address (the one the pod had
	// before a reboot); nil takes any free one.
	IP net.IP
}

func (n *Network) runtimeConf(podID, netns, ifName string, ports []PortMapping) *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{ContainerID: podID, NetNS: netns, IfName: ifName}
	if len(ports) > 0 {
		pm := make([]map[string]any, 0, len(ports))
		for _, p := range ports {
			m := map[string]any{"hostPort": p.HostPort, "containerPort": p.ContainerPort, "protocol": strings.ToLower(p.Protocol)}
			if p.Protocol == "" {
				m["protocol"] = "tcp"
			}
			if p.HostIP != "" {
				m["hostIP"] = p.HostIP
			}
			pm = append(pm, m)
		}
		rt.CapabilityArgs = map[string]any{"portMappings": pm}
	}
	return rt
}

// Setup attaches the pod's network namespace and returns its IP. On error
// it undoes what it did, so Setup can simply be retried.
func (n *Network) Setup(ctx context.Context, podID, netnsPath string, at Attach) (net.IP, error) {
	if podID == "" {
		return nil, fmt.Errorf("cni setup: empty pod ID")
	}
	if !isNetNS(netnsPath) {
		return nil, fmt.Errorf("cni setup of pod %s: %w: %s", podID, ErrNoNetNS, netnsPath)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, err := n.cni.AddNetworkList(ctx, n.loopback, n.runtimeConf(podID, netnsPath, "lo", nil)); err != nil {
		return nil, fmt.Errorf("cni setup of pod %s: loopback: %w", podID, err)
	}
	rt := n.runtimeConf(podID, netnsPath, n.cfg.IfName, at.Ports)
	if at.IP != nil {
		// host-local reads IP from CNI_ARGS; the other plugins ignore it.
		rt.Args = [][2]string{{"IgnoreUnknown", "1"}, {"IP", at.IP.String()}}
	}
	res, err := n.cni.AddNetworkList(ctx, n.list, rt)
	if err != nil {
		derr := n.teardown(ctx, podID, netnsPath)
		return nil, errors.Join(fmt.Errorf("cni setup of pod %s on network %s: %w", podID, n.list.Name, err), derr)
	}
	ip, err := podIP(res, n.cfg.IfName)
	if err != nil {
		derr := n.teardown(ctx, podID, netnsPath)
		return nil, errors.Join(fmt.Errorf("cni setup of pod %s: %w", podID, err), derr)
	}
	return ip, nil
}

// podIP picks the pod interface's address from a result, IPv4 first.
func podIP(res types.Result, ifName string) (net.IP, error) {
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, fmt.Errorf("read CNI result: %w", err)
	}
	var v6 net.IP
	for _, ipc := range r.IPs {
		if ipc.Interface != nil && *ipc.Interface < len(r.Interfaces) {
			iface := r.Interfaces[*ipc.Interface]
			if iface.Sandbox == "" || iface.Name != ifName {
				continue
			}
		}
		if ip4 := ipc.Address.IP.To4(); ip4 != nil {
			return ip4, nil
		}
		if v6 == nil {
			v6 = ipc.Address.IP
		}
	}
	if v6 != nil {
		return v6, nil
	}
	return nil, fmt.Errorf("the network's plugins returned no IP for %s", ifName)
}

// Teardown detaches the pod. It uses the port mappings cached at Setup
// (also by an earlier agent process) and works, as far as the plugins
// allow, when the namespace is already gone. Repeating it is harmless.
func (n *Network) Teardown(ctx context.Context, podID, netnsPath string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.teardown(ctx, podID, netnsPath)
}

func (n *Network) teardown(ctx context.Context, podID, netnsPath string) error {
	if !isNetNS(netnsPath) {
		// Plugins clean host-side state (IPAM, iptables) without a netns.
		netnsPath = ""
	}
	rt := n.runtimeConf(podID, netnsPath, n.cfg.IfName, nil)
	if _, cached, err := n.cni.GetNetworkListCachedConfig(n.list, rt); err == nil && cached != nil {
		rt.CapabilityArgs = cached.CapabilityArgs
	}
	var errs []error
	if err := n.cni.DelNetworkList(ctx, n.list, rt); err != nil {
		errs = append(errs, fmt.Errorf("cni teardown of pod %s on network %s: %w", podID, n.list.Name, err))
	}
	if netnsPath != "" {
		if err := n.cni.DelNetworkList(ctx, n.loopback, n.runtimeConf(podID, netnsPath, "lo", nil)); err != nil {
			errs = append(errs, fmt.Errorf("cni teardown of pod %s: loopback: %w", podID, err))
		}
	}
	return errors.Join(errs...)
}

// isNetNS reports whether path is a live namespace file (nsfs).
func isNetNS(path string) bool {
	var st unix.Statfs_t
	return path != "" && unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}
