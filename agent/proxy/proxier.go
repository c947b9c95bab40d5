package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/internal/run"
)

// ErrConfig is returned by New for a configuration that cannot work.
var ErrConfig = errors.New("invalid proxy configuration")

// Defaults for Config's tunables.
const (
	DefaultMinSyncInterval    = 100 * time.Millisecond
	DefaultFullResyncInterval = time.Minute
)

// Config configures a Proxier.
type Config struct {
	// NodeName is this device's Node name; endpoints on it are local
	// (externalTrafficPolicy Local). Required.
	NodeName string
	// NodeIP is the device's InternalIP (informational; NodePorts answer
	// on every local address).
	NodeIP string
	// ClusterCIDR is the pod network; traffic to services from outside it
	// is masqueraded. api.ClusterCIDR when empty.
	ClusterCIDR string
	// Informers supplies Services and EndpointSlices; when nil one is made
	// from Client. A shared factory may be passed: New registers its
	// informers, Run starts it.
	Informers *hubclient.Informers
	Client    hubclient.Interface
	// IPTables is the packet filter; System("") when nil.
	IPTables IPTables
	// Conntrack flushes stale UDP flows; the conntrack CLI when nil.
	Conntrack Conntrack
	// NetNSPath, when set, is the network namespace the rules go into
	// (tests and simulated devices); the agent's own otherwise.
	NetNSPath string
	// MinSyncInterval is the least time between two syncs, so a burst of
	// changes costs one write (DefaultMinSyncInterval).
	MinSyncInterval time.Duration
	// FullResyncInterval is how often the kernel's tables are read back
	// and repaired (DefaultFullResyncInterval).
	FullResyncInterval time.Duration
	// OnSync, when set, is called after every sync (metrics, tests).
	OnSync func(SyncResult)
	Log    *slog.Logger
}

// SyncResult describes one sync.
type SyncResult struct {
	// Full: the kernel's tables were read back first.
	Full bool
	// ServicePorts is how many service ports the rules cover.
	ServicePorts int
	// ChainsWritten and ChainsDeleted: what the transaction changed; both
	// zero means iptables-restore was not run.
	ChainsWritten, ChainsDeleted int
	// Restores is 1 when iptables-restore ran.
	Restores int
	// Duration is the whole sync, from reading the caches to the kernel;
	// Restore the part of it spent in iptables-restore, ReadBack the part
	// spent ensuring base chains and reading the tables (full syncs).
	Duration, Restore, ReadBack time.Duration
	// Err is the sync's failure, if any.
	Err error
}

// Proxier keeps the kernel's service rules equal to the Services and
// EndpointSlices it is shown.
type Proxier struct {
	cfg       Config
	log       *slog.Logger
	factory   *hubclient.Informers
	services  corelisters.ServiceLister
	slices    discoverylisters.EndpointSliceLister
	hasSynced []cache.InformerSynced

	// syncs runs Sync after changes, one at a time, bursts folded.
	syncs run.Coalescer

	// Owned by the sync loop.
	written written // nil: unknown, read it back before writing
	// writtenPorts are the port renderings the kernel holds (valid
	// with written).
	writtenPorts map[string]*portRules
	lastPorts    []*servicePort
	render       renderer

	mu      sync.Mutex
	running bool
	// defaultCIDRs are Config.ClusterCIDR's, for a Node that announces
	// none; nodes reads this device's Node for the ones it announces.
	defaultCIDRs []string
	nodes        corelisters.NodeLister
}

// New checks cfg and registers the informers; Run does the work.
func New(cfg Config) (*Proxier, error) {
	if cfg.NodeName == "" {
		return nil, fmt.Errorf("%w: NodeName is required (the device's Node name)", ErrConfig)
	}
	if cfg.ClusterCIDR == "" {
		cfg.ClusterCIDR = api.ClusterCIDR
	}
	cidrs, err := parseCIDRs(cfg.ClusterCIDR)
	if err != nil {
		return nil, err
	}
	if cfg.NodeIP != "" {
		if _, err := netip.ParseAddr(cfg.NodeIP); err != nil {
			return nil, fmt.Errorf("%w: NodeIP %q is not an IP address", ErrConfig, cfg.NodeIP)
		}
	}
	if cfg.Informers == nil {
		if cfg.Client == nil {
			return nil, fmt.Errorf("%w: set Informers or Client", ErrConfig)
		}
		cfg.Informers = hubclient.NewInformers(cfg.Client)
	}
	if cfg.MinSyncInterval <= 0 {
		cfg.MinSyncInterval = DefaultMinSyncInterval
	}
	if cfg.FullResyncInterval <= 0 {
		cfg.FullResyncInterval = DefaultFullResyncInterval
	}
	if cfg.Conntrack == nil {
		cfg.Conntrack = ConntrackCLI{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	p := &Proxier{cfg: cfg, log: cfg.Log.With("component", "proxy"), factory: cfg.Informers,
		render: renderer{clusterCIDRs: cidrs}, defaultCIDRs: cidrs}
	p.syncs.MinInterval = cfg.MinSyncInterval
	p.syncs.Resync = cfg.FullResyncInterval
	p.syncs.RetryMin, p.syncs.RetryMax = time.Second, 30*time.Second
	p.syncs.OnError = func(err error, retryIn time.Duration) {
		p.log.Error("syncing service rules failed; retrying", "err", err, "retryIn", retryIn)
	}
	svcInf := cfg.Informers.Services()
	sliceInf := cfg.Informers.EndpointSlices()
	p.services, p.slices = svcInf.Lister, sliceInf.Lister
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.markDirty() },
		UpdateFunc: func(any, any) { p.markDirty() },
		DeleteFunc: func(any) { p.markDirty() },
	}
	r1, err := svcInf.Informer.AddEventHandler(h)
	if err != nil {
		return nil, fmt.Errorf("proxy: watch services: %w", err)
	}
	r2, err := sliceInf.Informer.AddEventHandler(h)
	if err != nil {
		return nil, fmt.Errorf("proxy: watch endpointslices: %w", err)
	}
	// This device's Node says what the pod network is.
	nodeInf := cfg.Informers.Nodes()
	p.nodes = nodeInf.Lister
	r3, err := nodeInf.Informer.AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			n, ok := obj.(*corev1.Node)
			return ok && n.Name == cfg.NodeName
		},
		Handler: h,
	})
	if err != nil {
		return nil, fmt.Errorf("proxy: watch nodes: %w", err)
	}
	p.hasSynced = []cache.InformerSynced{r1.HasSynced, r2.HasSynced, r3.HasSynced}
	return p, nil
}

// clusterCIDRs is the pod network: as the hub announces it on this
// device's Node, or as configured when it does not.
func (p *Proxier) clusterCIDRs() []string {
	node, _ := p.nodes.Get(p.cfg.NodeName)
	cidrs, err := api.PodNetworkOf(node, p.defaultCIDRs)
	if err != nil {
		p.log.Warn("the Node's cluster CIDRs are unreadable; using the configured ones", "err", err)
	}
	return cidrs
}

func parseCIDRs(list string) ([]string, error) {
	ranges, err := api.ParseClusterCIDRs(list)
	if err != nil {
		return nil, fmt.Errorf("%w: ClusterCIDR: %w", ErrConfig, err)
	}
	out := make([]string, len(ranges))
	for i, r := range ranges {
		out[i] = r.String()
	}
	return out, nil
}

// markDirty asks the loop for a sync; it never blocks, and many calls
// before the loop looks cost one sync.
func (p *Proxier) markDirty() { p.syncs.Trigger() }

// Run writes the rules once the caches have synced and then after every
// change, until ctx ends. Rules stay in the kernel when Run returns (and
// while the hub is unreachable): the device keeps serving.
func (p *Proxier) Run(ctx context.Context) error {
	p.mu.Lock()
	if p.running {
		p.mu.Unlock()
		return errors.New("proxy: Run called twice")
	}
	p.running = true
	p.mu.Unlock()

	if p.cfg.IPTables == nil {
		var ipt IPTables
		err := p.inNetNS(func() error {
			var err error
			ipt, err = System("")
			return err
		})
		if err != nil {
			return err
		}
		p.cfg.IPTables = ipt
	}
	p.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), p.hasSynced...) {
		return ctx.Err()
	}
	p.log.Info("proxy caches synced; writing service rules")
	return p.inNetNS(func() error { return p.loop(ctx) })
}

// inNetNS runs fn on this goroutine, switched into Config.NetNSPath when
// set: every iptables and conntrack command fn starts inherits it.
func (p *Proxier) inNetNS(fn func() error) error {
	if p.cfg.NetNSPath == "" {
		return fn()
	}
	return ns.WithNetNSPath(p.cfg.NetNSPath, func(ns.NetNS) error { return fn() })
}

// loop syncs at once (full: the kernel's tables are read back), then
// after every change, never two syncs closer than MinSyncInterval; every
// FullResyncInterval, and after a failure (backing off from 1s to 30s),
// the sync is full.
func (p *Proxier) loop(ctx context.Context) error {
	return p.syncs.Run(ctx, func(ctx context.Context, full bool) error { return p.Sync(ctx, full).Err })
}

// Sync computes the rules from the caches and writes what differs from
// the kernel. full reads the kernel's tables back first (and ensures the
// base chains and jumps); otherwise the proxy trusts what it last wrote.
// Run calls it; it is exported for benchmarks, which drive syncs
// themselves. Not safe for concurrent use with Run.
func (p *Proxier) Sync(ctx context.Context, full bool) SyncResult {
	start := time.Now()
	res := SyncResult{Full: full || p.written == nil}
	res.Err = p.sync(ctx, &res)
	res.Duration = time.Since(start)
	if res.Err == nil {
		p.log.Debug("service rules synced", "full", res.Full, "servicePorts", res.ServicePorts,
			"chainsWritten", res.ChainsWritten, "chainsDeleted", res.ChainsDeleted, "duration", res.Duration)
	}
	if p.cfg.OnSync != nil {
		p.cfg.OnSync(res)
	}
	return res
}

func (p *Proxier) sync(ctx context.Context, res *SyncResult) error {
	if p.cfg.IPTables == nil {
		ipt, err := System("")
		if err != nil {
			return err
		}
		p.cfg.IPTables = ipt
	}
	ipt := p.cfg.IPTables
	services, err := p.services.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("proxy: list services: %w", err)
	}
	slices, err := p.slices.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("proxy: list endpointslices: %w", err)
	}
	ports := buildModel(p.cfg.NodeName, services, slices)
	res.ServicePorts = len(ports)
	if c := p.clusterCIDRs(); strings.Join(c, ",") != strings.Join(p.render.clusterCIDRs, ",") {
		p.render.clusterCIDRs, p.render.cache = c, nil
		p.log.Info("pod network", "clusterCIDRs", c)
	}
	want := p.render.render(ports)

	if res.Full {
		readStart := time.Now()
		defer func() { res.ReadBack = time.Since(readStart) - res.Restore }()
		p.written, p.writtenPorts = nil, nil
		if err := ensureBase(ipt); err != nil {
			return err
		}
		saved, err := ipt.Save(ctx, tableNAT, tableFilter)
		if err != nil {
			return err
		}
		tables, err := parseSave(saved)
		if err != nil {
			return fmt.Errorf("proxy: %w", err)
		}
		p.written = writtenFromSave(tables)
	}
	pl := diff(want, p.written, p.writtenPorts)
	if !pl.empty() {
		restoreStart := time.Now()
		err := ipt.Restore(ctx, pl.payload())
		res.Restore = time.Since(restoreStart)
		if err != nil {
			// What the kernel holds is unknown now: read it back next time.
			p.written, p.writtenPorts = nil, nil
			return err
		}
		res.Restores = 1
		for _, w := range pl.Write {
			p.written[w.Key] = w.Sum
		}
		for _, k := range pl.Delete {
			delete(p.written, k)
		}
	}
	p.writtenPorts = make(map[string]*portRules, len(want.ports))
	for _, pr := range want.ports {
		p.writtenPorts[pr.key] = pr
	}
	res.ChainsWritten, res.ChainsDeleted = len(pl.Write), len(pl.Delete)

	if p.lastPorts != nil {
		for _, f := range staleFlows(p.lastPorts, ports) {
			if err := p.cfg.Conntrack.ClearUDP(ctx, f); err != nil {
				// The rules are right; a stale flow only delays a client.
				p.log.Warn("deleting stale UDP conntrack entries failed", "filter", f, "err", err)
			}
		}
	}
	p.lastPorts = ports
	return nil
}

// ensureBase creates the base chains and the jumps to them.
func ensureBase(ipt IPTables) error {
	for _, k := range baseChains {
		if err := ipt.EnsureChain(k.Table, k.Chain); err != nil {
			return err
		}
	}
	// Inserted in reverse so that they end up in the listed order.
	for i := len(jumps) - 1; i >= 0; i-- {
		j := jumps[i]
		if err := ipt.EnsureRule(j.Table, j.Chain, j.Rule...); err != nil {
			return err
		}
	}
	return nil
}
