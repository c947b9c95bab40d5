package routes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/agent/proxy"
	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/internal/run"
)

// RouteProtocol tags the routes this package makes (rtnetlink protocol
// number; `ip route show proto 241`).
const RouteProtocol = 241

// Chains this package writes.
const (
	ChainEgress     = "FLOTILLA-EGRESS"
	ChainPodForward = "FLOTILLA-POD-FORWARD"
)

// DefaultResyncInterval: routes and rules are checked at least this often,
// so a route deleted by hand comes back.
const DefaultResyncInterval = 30 * time.Second

// ErrConfig is returned by New for a configuration that cannot work.
var ErrConfig = errors.New("invalid routes configuration")

// IPTables is what this package needs of iptables (proxy.SystemIPTables
// provides it).
type IPTables interface {
	EnsureChain(table, chain string) error
	EnsureRule(table, chain string, rule ...string) error
	Save(ctx context.Context, tables ...string) ([]byte, error)
	Restore(ctx context.Context, data []byte) error
}

// Config configures a Router.
type Config struct {
	// NodeName is this device's Node; its own pod CIDR gets no route.
	NodeName string
	// Informers supplies Nodes; one is made from Client when nil.
	Informers *hubclient.Informers
	Client    hubclient.Interface
	// ClusterCIDR is the pod network (comma-separated ranges;
	// api.ClusterCIDR when empty) while this device's Node does not
	// announce one (api.AnnotationClusterCIDRs).
	ClusterCIDR string
	// IPTables; proxy.System("") when nil.
	IPTables IPTables
	// NetNSPath, when set, is the network namespace to manage (tests,
	// simulated devices).
	NetNSPath      string
	ResyncInterval time.Duration
	// OnSync, when set, is called after every sync with its error.
	OnSync func(error)
	Log    *slog.Logger
}

// Router keeps the routes and the egress rules.
type Router struct {
	cfg       Config
	log       *slog.Logger
	nodes     corelisters.NodeLister
	factory   *hubclient.Informers
	hasSynced cache.InformerSynced
	// syncs runs sync after changes, one at a time, bursts folded.
	syncs run.Coalescer

	mu          sync.Mutex
	unreachable map[string]bool // nodes already warned about
}

// New checks cfg and registers the Node informer; Run does the work.
func New(cfg Config) (*Router, error) {
	if cfg.NodeName == "" {
		return nil, fmt.Errorf("%w: NodeName is required", ErrConfig)
	}
	if cfg.ClusterCIDR == "" {
		cfg.ClusterCIDR = api.ClusterCIDR
	}
	ranges, err := api.ParseClusterCIDRs(cfg.ClusterCIDR)
	if err != nil {
		return nil, fmt.Errorf("%w: ClusterCIDR: %w", ErrConfig, err)
	}
	cfg.ClusterCIDR = api.JoinCIDRs(ranges)
	if cfg.Informers == nil {
		if cfg.Client == nil {
			return nil, fmt.Errorf("%w: set Informers or Client", ErrConfig)
		}
		cfg.Informers = hubclient.NewInformers(cfg.Client)
	}
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = DefaultResyncInterval
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Router{cfg: cfg, log: cfg.Log.With("component", "routes"), factory: cfg.Informers,
		unreachable: map[string]bool{}}
	r.syncs.Resync = cfg.ResyncInterval
	inf := cfg.Informers.Nodes()
	r.nodes = inf.Lister
	reg, err := inf.Informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { r.markDirty() },
		UpdateFunc: func(any, any) { r.markDirty() },
		DeleteFunc: func(any) { r.markDirty() },
	})
	if err != nil {
		return nil, fmt.Errorf("routes: watch nodes: %w", err)
	}
	r.hasSynced = reg.HasSynced
	return r, nil
}

func (r *Router) markDirty() { r.syncs.Trigger() }

// Run keeps routes and rules until ctx ends; they stay when it returns.
func (r *Router) Run(ctx context.Context) error {
	h, err := r.handle()
	if err != nil {
		return err
	}
	defer h.Close()
	if r.cfg.IPTables == nil {
		err := r.inNetNS(func() error {
			ipt, err := proxy.System("")
			r.cfg.IPTables = ipt
			return err
		})
		if err != nil {
			return err
		}
	}
	r.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), r.hasSynced) {
		return ctx.Err()
	}
	// Once now, then after every change and every ResyncInterval; a
	// failure waits for the next of them.
	return r.syncs.Run(ctx, func(ctx context.Context, _ bool) error {
		err := r.inNetNS(func() error { return r.sync(ctx, h) })
		if err != nil {
			r.log.Error("syncing pod routes failed; retrying", "err", err)
		}
		if r.cfg.OnSync != nil {
			r.cfg.OnSync(err)
		}
		return err
	})
}

func (r *Router) inNetNS(fn func() error) error {
	if r.cfg.NetNSPath == "" {
		return fn()
	}
	return ns.WithNetNSPath(r.cfg.NetNSPath, func(ns.NetNS) error { return fn() })
}

func (r *Router) handle() (*netlink.Handle, error) {
	if r.cfg.NetNSPath == "" {
		return netlink.NewHandle()
	}
	nsh, err := netns.GetFromPath(r.cfg.NetNSPath)
	if err != nil {
		return nil, fmt.Errorf("routes: open network namespace %s: %w", r.cfg.NetNSPath, err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		return nil, fmt.Errorf("routes: netlink in %s: %w", r.cfg.NetNSPath, err)
	}
	return h, nil
}

// desired returns pod CIDR -> gateway for every other node of this
// device's site that has both.
func (r *Router) desired() (map[string]net.IP, error) {
	nodes, err := r.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	return routesTo(nodes, r.cfg.NodeName), nil
}

// routesTo is pod CIDR -> gateway for the nodes on self's site but self.
// Devices of one site share a network; other sites' devices may not be
// reachable at all, and their pods are served only through fleet-wide
// Services on networks routed by other means. Until self's Node is
// known, its site is taken as none.
func routesTo(nodes []*corev1.Node, self string) map[string]net.IP {
	site := ""
	for _, n := range nodes {
		if n.Name == self {
			site = api.SiteOf(n)
		}
	}
	out := map[string]net.IP{}
	for _, n := range nodes {
		if n.Name == self || api.SiteOf(n) != site {
			continue
		}
		gw := internalIP(n)
		if gw == nil {
			continue
		}
		cidrs := n.Spec.PodCIDRs
		if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
			cidrs = []string{n.Spec.PodCIDR}
		}
		for _, c := range cidrs {
			p, err := netip.ParsePrefix(c)
			if err != nil || !p.Addr().Is4() {
				continue
			}
			out[p.Masked().String()] = gw
		}
	}
	return out
}

func internalIP(n *corev1.Node) net.IP {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			if ip := net.ParseIP(a.Address).To4(); ip != nil {
				return ip
			}
		}
	}
	return nil
}

func (r *Router) sync(ctx context.Context, h *netlink.Handle) error {
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		r.log.Warn("cannot turn IP forwarding on; pods will not reach other devices", "err", err)
	}
	var errs []error
	if err := r.syncRules(ctx); err != nil {
		errs = append(errs, err)
	}
	want, err := r.desired()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	have, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("routes: list routes: %w", err))...)
	}
	for _, rt := range have {
		if rt.Dst == nil {
			continue
		}
		if gw, ok := want[rt.Dst.String()]; ok && gw.Equal(rt.Gw) {
			delete(want, rt.Dst.String())
			continue
		}
		if err := h.RouteDel(&rt); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("routes: delete route to %s via %s: %w", rt.Dst, rt.Gw, err))
		} else {
			r.log.Info("pod route removed", "podCIDR", rt.Dst.String(), "via", rt.Gw)
		}
	}
	for cidr, gw := range want {
		_, dst, _ := net.ParseCIDR(cidr)
		rt := &netlink.Route{Dst: dst, Gw: gw, Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN}
		err := h.RouteReplace(rt)
		if errors.Is(err, unix.ENETUNREACH) {
			// Not on our segment: the host-gateway limit (see doc.go).
			r.warnUnreachable(cidr, gw)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("routes: route to %s via %s: %w", cidr, gw, err))
			continue
		}
		r.log.Info("pod route added", "podCIDR", cidr, "via", gw)
	}
	return errors.Join(errs...)
}

func (r *Router) warnUnreachable(cidr string, gw net.IP) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := cidr + " " + gw.String()
	if r.unreachable[key] {
		return
	}
	r.unreachable[key] = true
	r.log.Warn("a device's InternalIP is not on a directly connected network: its pods are not routable from here (host-gateway routing needs every device on one L2 segment)",
		"podCIDR", cidr, "internalIP", gw)
}

// clusterCIDRs is the pod network: as the hub announces it on this
// device's Node, or as configured when it does not.
func (r *Router) clusterCIDRs() []string {
	node, _ := r.nodes.Get(r.cfg.NodeName)
	cidrs, err := api.PodNetworkOf(node, strings.Split(r.cfg.ClusterCIDR, ","))
	if err != nil {
		r.log.Warn("the Node's cluster CIDRs are unreadable; using the configured ones", "err", err)
	}
	return cidrs
}

// egressRules are the contents of the two chains for the pod ranges.
func (r *Router) egressRules() map[[2]string][]string {
	cidrs := r.clusterCIDRs()
	var nat, filter []string
	for _, src := range cidrs {
		for _, dst := range cidrs {
			nat = append(nat, "-A "+ChainEgress+" -s "+src+" -d "+dst+` -m comment --comment "pod to pod keeps its address" -j RETURN`)
		}
	}
	for _, c := range cidrs {
		nat = append(nat, "-A "+ChainEgress+" -s "+c+` -m comment --comment "pod traffic leaving the pod network" -m addrtype ! --dst-type LOCAL -j MASQUERADE --random-fully`)
	}
	for _, c := range cidrs {
		filter = append(filter,
			"-A "+ChainPodForward+" -s "+c+` -m comment --comment "flotilla pod network" -j ACCEPT`,
			"-A "+ChainPodForward+" -d "+c+` -m comment --comment "flotilla pod network" -j ACCEPT`)
	}
	return map[[2]string][]string{{"nat", ChainEgress}: nat, {"filter", ChainPodForward}: filter}
}

// syncRules writes the two chains when they differ from what the kernel
// has and ensures the jumps to them.
func (r *Router) syncRules(ctx context.Context) error {
	ipt := r.cfg.IPTables
	want := r.egressRules()
	for k := range want {
		if err := ipt.EnsureChain(k[0], k[1]); err != nil {
			return err
		}
	}
	if err := ipt.EnsureRule("nat", "POSTROUTING", "-m", "comment", "--comment", "flotilla pod egress", "-j", ChainEgress); err != nil {
		return err
	}
	if err := ipt.EnsureRule("filter", "FORWARD", "-m", "comment", "--comment", "flotilla pod network", "-j", ChainPodForward); err != nil {
		return err
	}
	saved, err := ipt.Save(ctx, "nat", "filter")
	if err != nil {
		return err
	}
	have := map[[2]string][]string{}
	table := ""
	for _, l := range strings.Split(string(saved), "\n") {
		switch {
		case strings.HasPrefix(l, "*"):
			table = l[1:]
		case strings.HasPrefix(l, "-A "+ChainEgress+" "), strings.HasPrefix(l, "-A "+ChainPodForward+" "):
			chain := strings.Fields(l)[1]
			have[[2]string{table, chain}] = append(have[[2]string{table, chain}], l)
		}
	}
	var b strings.Builder
	for _, t := range []string{"filter", "nat"} {
		for k, rules := range want {
			if k[0] != t || slices.Equal(have[k], rules) {
				continue
			}
			fmt.Fprintf(&b, "*%s\n:%s - [0:0]\n%s\nCOMMIT\n", t, k[1], strings.Join(rules, "\n"))
		}
	}
	if b.Len() == 0 {
		return nil
	}
	return ipt.Restore(ctx, []byte(b.String()))
}

// Cleanup deletes every route this package made (in the current network
// namespace); the chains go with proxy.Cleanup, which removes every
// FLOTILLA chain.
func Cleanup(ctx context.Context) error {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return fmt.Errorf("routes cleanup: list routes: %w", err)
	}
	var errs []error
	for _, rt := range routes {
		if err := netlink.RouteDel(&rt); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("routes cleanup: delete route to %s: %w", rt.Dst, err))
		}
	}
	return errors.Join(errs...)
}
