package agent

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/agent/cni"
	"flotilla.dev/flotilla/agent/dns"
	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/agent/kubelet"
	"flotilla.dev/flotilla/agent/localcache"
	"flotilla.dev/flotilla/agent/localstore"
	"flotilla.dev/flotilla/agent/node"
	"flotilla.dev/flotilla/agent/proxy"
	"flotilla.dev/flotilla/agent/routes"
	"flotilla.dev/flotilla/agent/runtime"
	"flotilla.dev/flotilla/agent/runtime/podns"
	"flotilla.dev/flotilla/agent/server"
	"flotilla.dev/flotilla/agent/static"
	"flotilla.dev/flotilla/agent/stats"
	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/api/image"
	"flotilla.dev/flotilla/internal/atomicfile"
	"flotilla.dev/flotilla/internal/run"
	"flotilla.dev/flotilla/internal/version"
	"flotilla.dev/flotilla/registry"
	"flotilla.dev/flotilla/registry/trust"
)

// Defaults from Flotilla's contracts.
const (
	DefaultDataDir = "/var/lib/flotilla/agent"
	// DefaultContainerdRoot is containerd's own default root.
	DefaultContainerdRoot = "/var/lib/containerd"
	podCIDRFile           = "pod-cidr"
	// stateFile keeps the last known desired state (agent/localstore).
	stateFile = "state.db"
)

var (
	// ErrConfig is returned for a configuration that cannot work.
	ErrConfig = errors.New("invalid agent configuration")
	// ErrPodCIDRChanged ends Run when the hub assigned another pod CIDR
	// than the one the pod network was set up with; the next Run moves
	// the pod network (bridge, IPAM, pods' sandboxes) to it.
	ErrPodCIDRChanged = errors.New("the node's pod CIDR changed; restart the agent to apply it")
	// ErrSiteChanged ends Run when this device's Node moved to another
	// site than the one its proxy, DNS and routes serve; the next Run
	// takes the new site's EndpointSlices.
	ErrSiteChanged = errors.New("the node's site changed; restart the agent to apply it")
)

// Credentials gives the agent its client configuration for the hub. It
// may block (a join waits for the hub) and must return a config that
// carries the hub's CA.
type Credentials func(ctx context.Context) (*rest.Config, error)

// Config is everything the agent is started with. Every field but
// Credentials and Log is also a config key, flag and FLOTILLA_ environment
// variable (see cmd/flotilla-agent).
type Config struct {
	// NodeName is the device's Node name (required).
	NodeName string
	// DataDir holds pki/ (the serving certificate), pods/ (volumes) and
	// pod-cidr; DefaultDataDir when empty.
	DataDir string
	// ContainerdAddress and ContainerdNamespace: runtime.DefaultSocket and
	// runtime.DefaultNamespace when empty.
	ContainerdAddress   string
	ContainerdNamespace string
	// Labels are set on the Node (see node.Config.Labels).
	Labels map[string]string
	// NodeIP is the address the hub reaches this device on; the default
	// route's address when empty.
	NodeIP string
	// ServerListen is the agent server's address; server.DefaultListen
	// when empty.
	ServerListen string
	// CNIConfDir and CNIBinDirs: cni's defaults when empty.
	CNIConfDir string
	CNIBinDirs []string
	// LogDir holds container logs; runtime.DefaultLogDir when empty.
	LogDir string
	// MaxPods is the Node's pods capacity; 110 when zero.
	MaxPods int
	// Registries configures registry hosts (mirrors, plain HTTP, auth).
	Registries registry.Config
	// RunDir and LoggerPath pass through to the runtime (tests point
	// them at temporary places); the runtime's defaults when empty.
	RunDir     string
	LoggerPath string
	// NetNSPath is the network namespace the pod network and the service
	// rules live in; the agent's own when empty (tests and simulated
	// devices give each agent a private one).
	NetNSPath string
	// ManifestsDir holds static pods (static.DefaultDir when empty).
	ManifestsDir string
	// TrustDir holds the cosign public keys (*.pub) images must be signed
	// by (DefaultTrustDir when empty); with no key there, images are not
	// verified. TrustPolicy says which keys for which images, or that
	// some images go unverified.
	TrustDir    string
	TrustPolicy []trust.Rule
	// Images is the digest policy: which images may run by tag.
	Images image.Policy
	// DisableMetrics turns off the usage figures: none on /metrics and
	// no reports to the hub (kubectl top and flotctl fleet status then
	// show nothing for this device).
	DisableMetrics bool
	// UsageInterval is how often the device reports its usage to the hub;
	// stats.DefaultReportInterval (60 s) when zero.
	UsageInterval time.Duration
	// ContainerdRoot is containerd's root directory, whose filesystem is
	// reported beside the data dir's; DefaultContainerdRoot when empty.
	ContainerdRoot string
	// Credentials obtain the hub client config; without them the agent
	// runs standalone: static pods only, no hub.
	Credentials Credentials
	Log         *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	var errs []error
	if errs2 := validation.IsDNS1123Subdomain(c.NodeName); len(errs2) > 0 {
		errs = append(errs, fmt.Errorf("node name %q: %s (set --node-name)", c.NodeName, strings.Join(errs2, "; ")))
	}
	if c.NodeIP != "" && net.ParseIP(c.NodeIP) == nil {
		errs = append(errs, fmt.Errorf("--node-ip %q is not an IP address", c.NodeIP))
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.ContainerdAddress == "" {
		c.ContainerdAddress = runtime.DefaultSocket
	}
	if c.ContainerdNamespace == "" {
		c.ContainerdNamespace = runtime.DefaultNamespace
	}
	if c.ServerListen == "" {
		c.ServerListen = server.DefaultListen
	}
	if c.ContainerdRoot == "" {
		c.ContainerdRoot = DefaultContainerdRoot
	}
	if c.UsageInterval == 0 {
		c.UsageInterval = stats.DefaultReportInterval
	}
	if c.UsageInterval < time.Second {
		errs = append(errs, fmt.Errorf("--usage-interval %v is shorter than a second (the default is %v)", c.UsageInterval, stats.DefaultReportInterval))
	}
	if _, _, err := net.SplitHostPort(c.ServerListen); err != nil {
		errs = append(errs, fmt.Errorf("--server-listen %q: %v (want host:port or :port)", c.ServerListen, err))
	}
	if c.LogDir == "" {
		c.LogDir = runtime.DefaultLogDir
	}
	if c.ManifestsDir == "" {
		c.ManifestsDir = static.DefaultDir
	}
	if c.TrustDir == "" {
		c.TrustDir = DefaultTrustDir
	}
	if err := (trust.Config{Dir: c.TrustDir, Policy: c.TrustPolicy}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("the trust policy: %w", err))
	}
	if err := c.Images.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("the images policy: %w", err))
	}
	for _, d := range []struct{ flag, path string }{{"--data-dir", c.DataDir}, {"--log-dir", c.LogDir}, {"--cni-conf-dir", c.CNIConfDir}, {"--manifests-dir", c.ManifestsDir}, {"--trust-dir", c.TrustDir}, {"--containerd-root", c.ContainerdRoot}} {
		if d.path != "" && !filepath.IsAbs(d.path) {
			errs = append(errs, fmt.Errorf("%s %q must be an absolute path", d.flag, d.path))
		}
	}
	if err := node.ValidateLabels(c.Labels); err != nil {
		errs = append(errs, err)
	}
	if c.MaxPods < 0 {
		errs = append(errs, fmt.Errorf("--max-pods %d is negative", c.MaxPods))
	}
	if err := c.Registries.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return c, nil
}

// Agent is a device agent.
type Agent struct {
	cfg Config
	log *slog.Logger

	// networkReady is set once the pod network is configured.
	networkReady atomic.Bool
	ctrd         *containerd.Client
}

// New checks cfg; Run does the work.
func New(cfg Config) (*Agent, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Agent{cfg: cfg, log: cfg.Log.With("node", cfg.NodeName)}, nil
}

// Run runs the agent until ctx ends or a part fails. Containers outlive
// it: a new agent adopts them.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if a.cfg.Credentials == nil {
		return a.runStandalone(ctx)
	}
	restCfg, err := a.cfg.Credentials(ctx)
	if err != nil {
		return fmt.Errorf("hub credentials: %w", err)
	}
	store, err := a.openState()
	if err != nil {
		return err
	}
	defer store.Close()
	hubCAs, err := caPool(restCfg)
	if err != nil {
		return err
	}
	client, err := hubclient.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("hub client: %w", err)
	}

	verifier, err := a.newVerifier(store)
	if err != nil {
		return err
	}
	rt, puller, runtimeVersion, err := a.openRuntime(ctx, verifier)
	if err != nil {
		return err
	}
	defer a.ctrd.Close()
	statics, err := a.staticPods()
	if err != nil {
		return err
	}

	hostname, _ := os.Hostname()
	cert, err := server.LoadOrCreateServingCert(filepath.Join(a.cfg.DataDir, "pki"), []string{a.cfg.NodeIP, a.cfg.NodeName, hostname})
	if err != nil {
		return fmt.Errorf("the agent's serving certificate: %w", err)
	}
	pin, err := server.CertHash(cert)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	usage := a.usage(client)
	if usage != nil {
		reg.MustRegister(stats.Metrics{C: usage.Collector})
	}
	srv, err := server.New(server.Config{
		Listen: a.cfg.ServerListen, LogDir: a.cfg.LogDir, Certificate: cert, ClientCAs: hubCAs,
		ContainerRunning: containerRunning(rt),
		Streamer:         podStreamer{rt},
		Metrics:          promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		Log:              a.log.With("component", "server"),
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	port := srv.Addr().(*net.TCPAddr).Port
	nd, err := node.New(node.Config{
		Client: client, Name: a.cfg.NodeName, Labels: a.cfg.Labels, NodeIP: a.cfg.NodeIP,
		Annotations: map[string]string{server.AnnotationServingCertHash: pin},
		MaxPods:     a.cfg.MaxPods, DataDir: a.cfg.DataDir, KubeletPort: int32(port),
		AgentVersion: version.Version, RuntimeVersion: runtimeVersion,
		Ready: a.ready, Log: a.log.With("component", "node"),
	})
	if err != nil {
		return err
	}
	// One set of informers for the proxy, the routes and the DNS server;
	// of the EndpointSlices, only this device's site's and the fleet-wide
	// ones.
	shared := hubclient.NewInformers(client)
	site, siteRV := a.site(ctx, client, store)
	siteSel, err := api.SiteSelector(site)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	shared.Scope(&discoveryv1.EndpointSlice{}, siteSel.String())
	// From the local store first: after a reboot without the hub the
	// proxy, routes and DNS start from what the hub last said.
	if err := localcache.Install(shared, client, store, a.log); err != nil {
		return err
	}
	px, err := proxy.New(proxy.Config{
		NodeName: a.cfg.NodeName, NodeIP: a.cfg.NodeIP, Informers: shared, NetNSPath: a.cfg.NetNSPath,
		Log: a.log.With("component", "proxy"),
	})
	if err != nil {
		return err
	}
	router, err := routes.New(routes.Config{
		NodeName: a.cfg.NodeName, Informers: shared, NetNSPath: a.cfg.NetNSPath, Log: a.log.With("component", "routes"),
	})
	if err != nil {
		return err
	}

	a.log.Info("agent started", "version", version.Version, "runtime", runtimeVersion, "server", srv.Addr().String(), "site", site)
	var usageLoops []run.Loop
	if usage != nil {
		usageLoops = append(usageLoops, run.Loop{Name: "usage reports", Run: usage.Run})
	}
	return run.Group{
		Loops: append(usageLoops, []run.Loop{
			{Name: "site", Run: func(ctx context.Context) error { return a.watchSite(ctx, shared, store, site, siteRV) }},
			{Name: "agent server", Run: srv.Run},
			{Name: "node", Run: nd.Run},
			{Name: "service proxy", Run: px.Run},
			{Name: "pod routes", Run: router.Run},
			{Name: "pods", Run: func(ctx context.Context) error { return a.runPods(ctx, client, shared, nd, rt, puller, store, statics) }},
			{Name: "trusted keys", Run: func(ctx context.Context) error { return a.watchTrust(ctx, verifier) }},
			{Name: "mirror pods", Run: func(ctx context.Context) error {
				return static.NewMirrorer(client, statics, a.cfg.NodeName, a.log.With("component", "mirror")).Run(ctx, statics.changed)
			}},
		}...),
		OnError: func(err error) { a.log.Error("agent stopping", "err", err) },
	}.Run(ctx)
}

// site is the site this device serves: the zone of its Node, which a
// join token or an admin gives (a device may not set it), as last stored,
// so that a start without the hub is not held up. A device that has no
// Node stored yet (it just joined) asks the hub, briefly; one that still
// does not know has none until its Node is seen (watchSite). rv is the
// resourceVersion of the Node it was read from (0: none).
func (a *Agent) site(ctx context.Context, client hubclient.Interface, store *localstore.Store) (site string, rv int64) {
	if n, ok, err := localstore.Get[corev1.Node](store, localstore.Nodes, "", a.cfg.NodeName); err == nil && ok {
		return api.SiteOf(n), revisionOf(n)
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if n, err := client.CoreV1().Nodes().Get(gctx, a.cfg.NodeName, metav1.GetOptions{}); err == nil {
		return api.SiteOf(n), revisionOf(n)
	}
	return "", 0
}

// revisionOf is n's resourceVersion as the hub's revision, 0 when it
// has none.
func revisionOf(n *corev1.Node) int64 {
	rv, _ := strconv.ParseInt(n.ResourceVersion, 10, 64)
	return rv
}

// watchSite returns ErrSiteChanged when this device's Node is seen on
// another site than site (an admin moved it), in a version written after
// the one the site was read from (rv). The informer's watch resumes from
// the resourceVersion the store recorded and replays the Node's changes
// since, older versions of it among them: taken for news, an older
// version on the old site sent the agent back to it, and the next start
// forth again, for ever.
func (a *Agent) watchSite(ctx context.Context, shared *hubclient.Informers, store *localstore.Store, site string, rv int64) error {
	moved := make(chan *corev1.Node, 1)
	seen := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok && n.Name == a.cfg.NodeName && api.SiteOf(n) != site && revisionOf(n) > rv {
			select {
			case moved <- n:
			default:
			}
		}
	}
	inf := shared.Nodes().Informer
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) },
	})
	if err != nil {
		return fmt.Errorf("watching the node's site: %w", err)
	}
	defer func() { _ = inf.RemoveEventHandler(reg) }()
	select {
	case <-ctx.Done():
		return nil
	case n := <-moved:
		// The next Run reads the site from the store: it must find this
		// Node there, whichever handler of the informer ran first.
		if err := localstore.Put(store, localstore.Nodes, n); err != nil {
			a.log.Warn("could not record the node's new site; the next start may take the old one first", "err", err)
		}
		return fmt.Errorf("%w (from %q to %q)", ErrSiteChanged, site, api.SiteOf(n))
	}
}

// usage is the reporter of the device's usage to the hub, whose
// collector also serves /metrics; nil when metrics are off.
func (a *Agent) usage(client hubclient.Interface) *stats.Reporter {
	if a.cfg.DisableMetrics {
		return nil
	}
	c := &stats.Collector{
		Containers: &stats.ContainerdSource{Client: a.ctrd, Namespace: a.cfg.ContainerdNamespace},
		Node: &stats.HostSource{Filesystems: []stats.FilesystemPath{
			{Name: "data", Path: a.cfg.DataDir}, {Name: "containerd", Path: a.cfg.ContainerdRoot},
		}},
	}
	cs, ok := client.(*hubclient.Clientset)
	if !ok {
		a.log.Warn("usage reports are off: the hub client cannot post them", "client", fmt.Sprintf("%T", client))
		return nil
	}
	// The usage endpoint is the hub's own, beside the API groups: a raw
	// POST through the core client (its TLS, rate limiter and retries).
	rc := cs.RESTClients()[0]
	return &stats.Reporter{
		Collector: c, Interval: a.cfg.UsageInterval, Log: a.log.With("component", "usage"),
		Post: func(ctx context.Context, body []byte) error {
			return rc.Post().AbsPath(agentapi.PathUsage).SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
		},
	}
}

// openState opens the device's local state in the data dir.
func (a *Agent) openState() (*localstore.Store, error) {
	if err := os.MkdirAll(a.cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the data dir: %w", err)
	}
	store, err := localstore.Open(filepath.Join(a.cfg.DataDir, stateFile), localstore.Options{})
	if err != nil {
		return nil, fmt.Errorf("the device's local state: %w", err)
	}
	return store, nil
}

// openRuntime connects to containerd (waiting for it) and returns the
// runtime, the image puller and containerd's version.
func (a *Agent) openRuntime(ctx context.Context, verifier registry.Verifier) (*runtime.Runtime, *registry.Puller, string, error) {
	var err error
	a.ctrd, err = containerd.New(a.cfg.ContainerdAddress, containerd.WithDefaultNamespace(a.cfg.ContainerdNamespace))
	if err != nil {
		return nil, nil, "", fmt.Errorf("containerd at %s: %w", a.cfg.ContainerdAddress, err)
	}
	runtimeVersion, err := a.waitContainerd(ctx)
	if err == nil {
		var rt *runtime.Runtime
		rt, err = runtime.New(runtime.Config{
			Client: a.ctrd, Namespace: a.cfg.ContainerdNamespace, LogDir: a.cfg.LogDir,
			RunDir: a.cfg.RunDir, LoggerPath: a.cfg.LoggerPath,
		})
		if err == nil {
			var puller *registry.Puller
			puller, err = registry.NewPuller(a.ctrd, registry.PullerConfig{
				Namespace: a.cfg.ContainerdNamespace, Registries: a.cfg.Registries,
				Policy: registry.Policy{Image: a.cfg.Images}, Verifier: verifier,
			})
			if err == nil {
				return rt, puller, runtimeVersion, nil
			}
		}
	}
	a.ctrd.Close()
	return nil, nil, "", err
}

// staticPods is the static pod source, which also tells the mirror pods'
// loop when the set changed.
type staticPods struct {
	*static.Source
	changed chan struct{}
}

func (a *Agent) staticPods() (*staticPods, error) {
	src, err := static.New(static.Config{Dir: a.cfg.ManifestsDir, NodeName: a.cfg.NodeName, Log: a.log.With("component", "static")})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &staticPods{Source: src, changed: make(chan struct{}, 1)}, nil
}

func (s *staticPods) Run(ctx context.Context, notify func(types.UID)) error {
	return s.Source.Run(ctx, func(uid types.UID) {
		notify(uid)
		select {
		case s.changed <- struct{}{}:
		default:
		}
	})
}

// runStandalone runs the static pods of a device that has no hub: no
// Node, no services, nothing reported; the pod network only where the
// device remembers a pod CIDR from an earlier join.
func (a *Agent) runStandalone(ctx context.Context) error {
	store, err := a.openState()
	if err != nil {
		return err
	}
	defer store.Close()
	verifier, err := a.newVerifier(store)
	if err != nil {
		return err
	}
	go a.watchTrust(ctx, verifier)
	rt, puller, _, err := a.openRuntime(ctx, verifier)
	if err != nil {
		return err
	}
	defer a.ctrd.Close()
	statics, err := a.staticPods()
	if err != nil {
		return err
	}
	cfg := kubelet.Config{
		NodeName: a.cfg.NodeName, Runtime: rt, Puller: puller, DisableHubSource: true,
		Sources: []kubelet.PodSource{statics}, RootDir: filepath.Join(a.cfg.DataDir, "pods"),
		NetNSPath: a.cfg.NetNSPath, Log: a.log,
	}
	if a.cfg.NodeIP != "" {
		cfg.HostIPs = []string{a.cfg.NodeIP}
	}
	if cidr := readCIDR(filepath.Join(a.cfg.DataDir, podCIDRFile)); cidr != "" {
		network, err := cni.New(cni.Config{ConfDir: a.cfg.CNIConfDir, BinDirs: a.cfg.CNIBinDirs, PodCIDR: cidr})
		if err != nil {
			return fmt.Errorf("pod network: %w", err)
		}
		cfg.Network = network
	} else {
		a.log.Info("no pod CIDR known (the device never joined a hub): only hostNetwork static pods can run")
	}
	k, err := kubelet.New(cfg)
	if err != nil {
		return err
	}
	a.log.Info("agent started standalone: static pods only, no hub", "version", version.Version, "manifests", a.cfg.ManifestsDir)
	return run.Group{Loops: []run.Loop{
		{Name: "kubelet", Run: k.Run},
		{Name: "local server", Run: func(ctx context.Context) error { return a.serveLocal(ctx, k) }},
	}}.Run(ctx)
}

// waitContainerd waits for containerd to answer and returns its version
// as nodeInfo shows it.
func (a *Agent) waitContainerd(ctx context.Context) (string, error) {
	delay := 200 * time.Millisecond
	for {
		vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := a.ctrd.Version(vctx)
		cancel()
		if err == nil {
			return "containerd://" + strings.TrimPrefix(v.Version, "v"), nil
		}
		a.log.Warn("containerd does not answer yet; waiting", "address", a.cfg.ContainerdAddress, "err", err)
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for containerd at %s: %w", a.cfg.ContainerdAddress, ctx.Err())
		case <-time.After(delay):
		}
		if delay *= 2; delay > 10*time.Second {
			delay = 10 * time.Second
		}
	}
}

// ready is the Node's Ready condition: containerd answers and the pod
// network is set up.
func (a *Agent) ready(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if ok, err := a.ctrd.IsServing(cctx); !ok {
		return fmt.Errorf("container runtime is down: %v", err)
	}
	if !a.networkReady.Load() {
		return errors.New("network plugin not ready: waiting for the hub to assign this node a pod CIDR")
	}
	return nil
}

// runPods sets up the pod network and runs the kubelet.
func (a *Agent) runPods(ctx context.Context, client hubclient.Interface, shared *hubclient.Informers, nd *node.Node, rt *runtime.Runtime, puller *registry.Puller, store *localstore.Store, statics *staticPods) error {
	cidrPath := filepath.Join(a.cfg.DataDir, podCIDRFile)
	cidr := readCIDR(cidrPath)
	if cidr == "" {
		a.log.Info("waiting for the hub to assign a pod CIDR")
		var err error
		if cidr, err = nd.WaitForPodCIDR(ctx); err != nil {
			return nil // ctx ended
		}
		if err := writeCIDR(cidrPath, cidr); err != nil {
			return err
		}
	}
	// The range the device remembers may have changed on the hub
	// meanwhile (a Node made again gets another), or may change later:
	// the agent then starts over on the new one.
	watchCIDR := func(ctx context.Context) error {
		hub, err := nd.PodCIDRChange(ctx, cidr)
		if err != nil {
			return nil // ctx ended
		}
		if err := writeCIDR(cidrPath, hub); err != nil {
			return err
		}
		return fmt.Errorf("%w (from %s to %s)", ErrPodCIDRChanged, cidr, hub)
	}
	netCfg := cni.Config{ConfDir: a.cfg.CNIConfDir, BinDirs: a.cfg.CNIBinDirs, PodCIDR: cidr}
	var moved bool
	if err := a.inNetNS(func() error {
		var err error
		moved, err = cni.ReleaseStaleRange(netCfg, cidr)
		return err
	}); err != nil {
		return fmt.Errorf("pod network: moving to the pod CIDR %s: %w (remove the bridge %s by hand: ip link delete %s)", cidr, err, cni.DefaultBridge, cni.DefaultBridge)
	}
	if moved {
		a.log.Warn("the pod network moved to the node's new pod CIDR; pods on the old range get new sandboxes", "podCIDR", cidr)
	}
	network, err := cni.New(netCfg)
	if err != nil {
		return fmt.Errorf("pod network: %w", err)
	}
	_, podNet, _ := net.ParseCIDR(cidr)
	// The cluster DNS server listens on the pod bridge's address (the
	// pod CIDR's first host, the bridge plugin's gateway), where every pod
	// reaches it.
	gw, err := gatewayOf(cidr)
	if err != nil {
		return err
	}
	svcs, slices := shared.Services(), shared.EndpointSlices()
	dnsSrv, err := dns.New(dns.Config{
		Listen: gw, Services: svcs.Lister, EndpointSlices: slices.Lister, NetNSPath: a.cfg.NetNSPath,
		HasSynced: func() bool { return svcs.Informer.HasSynced() && slices.Informer.HasSynced() },
		Log:       a.log,
	})
	if err != nil {
		return fmt.Errorf("cluster DNS: %w", err)
	}
	shared.Start(ctx.Done())
	a.networkReady.Store(true)
	a.log.Info("pod network configured", "podCIDR", cidr, "conf", network.ConfFile())
	var hostIPs []string
	if a.cfg.NodeIP != "" {
		hostIPs = []string{a.cfg.NodeIP}
	}
	k, err := kubelet.New(kubelet.Config{
		NodeName: a.cfg.NodeName, Client: client, Runtime: rt, Network: network, Puller: puller,
		HostIPs: hostIPs, ClusterDNS: []string{gw}, RootDir: filepath.Join(a.cfg.DataDir, "pods"), NetNSPath: a.cfg.NetNSPath, Log: a.log,
		Store: store, Sources: []kubelet.PodSource{statics}, PodCIDR: podNet,
	})
	if err != nil {
		return err
	}
	return run.Group{Loops: []run.Loop{
		{Name: "pod CIDR", Run: watchCIDR},
		{Name: "cluster DNS", Run: dnsSrv.Run},
		{Name: "kubelet", Run: k.Run},
		{Name: "local server", Run: func(ctx context.Context) error { return a.serveLocal(ctx, k) }},
	}}.Run(ctx)
}

// inNetNS runs fn in the pod network's namespace.
func (a *Agent) inNetNS(fn func() error) error {
	if a.cfg.NetNSPath == "" {
		return fn()
	}
	return podns.Do(a.cfg.NetNSPath, fn)
}

// gatewayOf is the first host address of a pod CIDR.
func gatewayOf(cidr string) (string, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() {
		return "", fmt.Errorf("%w: pod CIDR %q is not an IPv4 CIDR", ErrConfig, cidr)
	}
	return p.Masked().Addr().Next().String(), nil
}

func readCIDR(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if _, _, err := net.ParseCIDR(s); err != nil {
		return ""
	}
	return s
}

func writeCIDR(path, cidr string) error {
	if err := atomicfile.Write(path, []byte(cidr+"\n"), 0o644); err != nil {
		return fmt.Errorf("remembering the pod CIDR: %w", err)
	}
	return nil
}

// caPool is the hub CA from the client config: the agent server trusts
// the client certificates it signed.
func caPool(c *rest.Config) (*x509.CertPool, error) {
	pem := c.TLSClientConfig.CAData
	if len(pem) == 0 && c.TLSClientConfig.CAFile != "" {
		b, err := os.ReadFile(c.TLSClientConfig.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the hub CA: %w", err)
		}
		pem = b
	}
	pool := x509.NewCertPool()
	if len(pem) == 0 || !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: the hub credentials carry no CA certificate; the agent needs it to trust the hub and to let only the hub call it", ErrConfig)
	}
	return pool, nil
}

// containerRunning asks containerd whether a container attempt still
// runs, for the log follower.
func containerRunning(rt *runtime.Runtime) func(ctx context.Context, ref server.LogRef) (bool, error) {
	return func(ctx context.Context, ref server.LogRef) (bool, error) {
		cs, err := rt.ListContainers(ctx, runtime.ListFilter{PodUID: ref.UID})
		if err != nil {
			return false, err
		}
		for _, c := range cs {
			if c.Name == ref.Container && c.Attempt == ref.Attempt {
				return c.Status.State == runtime.StateRunning || c.Status.State == runtime.StateCreated, nil
			}
		}
		return false, nil
	}
}
