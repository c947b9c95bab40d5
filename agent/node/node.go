package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/agentapi"
)

// Defaults of the loops' timing, the kubelet's.
const (
	DefaultStatusInterval    = 10 * time.Second
	DefaultHeartbeatInterval = 5 * time.Minute
	DefaultLeaseInterval     = 10 * time.Second
	DefaultLeaseDuration     = 40 * time.Second
)

// ErrConfig is returned for a configuration that cannot work.
var ErrConfig = errors.New("invalid node configuration")

// Config is what the node is registered and kept current from.
type Config struct {
	// Client talks to the hub (required).
	Client hubclient.Interface
	// Name is the Node's name (required), also its kubernetes.io/hostname.
	Name string
	// Labels are set on the Node and owned by the agent.
	Labels map[string]string
	// Annotations are set on the Node and owned by the agent.
	Annotations map[string]string
	// NodeIP is the InternalIP; the address of the default route's
	// interface (re-read on every status tick) when empty.
	NodeIP string
	// MaxPods is the pods capacity; DefaultMaxPods when zero.
	MaxPods int
	// DataDir's filesystem is the ephemeral-storage (required).
	DataDir string
	// KubeletPort is where the agent's server listens (daemonEndpoints);
	// agentapi.AgentPort when zero.
	KubeletPort int32
	// AgentVersion and RuntimeVersion ("containerd://1.7.2") go into
	// nodeInfo.
	AgentVersion   string
	RuntimeVersion string
	// Ready says why the node cannot run pods (nil: it can); called on
	// every status tick. Nil means always ready.
	Ready func(ctx context.Context) error
	// Machine reads the machine's figures; HostMachine when nil.
	Machine Machine
	// Intervals; the Default* values when zero.
	StatusInterval    time.Duration
	HeartbeatInterval time.Duration
	LeaseInterval     time.Duration
	LeaseDuration     time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	Log *slog.Logger
}

// Node keeps the device's Node and Lease on the hub.
type Node struct {
	cfg    Config
	log    *slog.Logger
	client hubclient.Interface
	// fixed are the labels every node has.
	fixed map[string]string

	mu sync.Mutex
	// last is the newest Node seen, from our writes or the watch.
	last   *corev1.Node
	cidr   string
	cidrCh chan struct{} // closed once cidr is known
}

// New checks cfg and returns a Node; Run registers and maintains it.
func New(cfg Config) (*Node, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: no hub client", ErrConfig)
	}
	if errs := validation.IsDNS1123Subdomain(cfg.Name); len(errs) > 0 {
		return nil, fmt.Errorf("%w: node name %q: %s (set --node-name)", ErrConfig, cfg.Name, strings.Join(errs, "; "))
	}
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("%w: no data dir", ErrConfig)
	}
	if cfg.NodeIP != "" && net.ParseIP(cfg.NodeIP) == nil {
		return nil, fmt.Errorf("%w: node IP %q is not an IP address (--node-ip)", ErrConfig, cfg.NodeIP)
	}
	if cfg.MaxPods < 0 {
		return nil, fmt.Errorf("%w: max pods %d is negative", ErrConfig, cfg.MaxPods)
	}
	if cfg.MaxPods == 0 {
		cfg.MaxPods = DefaultMaxPods
	}
	if cfg.KubeletPort == 0 {
		cfg.KubeletPort = agentapi.AgentPort
	}
	if cfg.Machine == nil {
		cfg.Machine = HostMachine{}
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = DefaultStatusInterval
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.LeaseInterval <= 0 {
		cfg.LeaseInterval = DefaultLeaseInterval
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	fixed := map[string]string{
		api.LabelHostname: cfg.Name,
		api.LabelArch:     runtime.GOARCH,
		api.LabelOS:       runtime.GOOS,
	}
	if err := ValidateLabels(cfg.Labels); err != nil {
		return nil, err
	}
	for k := range cfg.Annotations {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("%w: annotation key %q: %s", ErrConfig, k, strings.Join(errs, "; "))
		}
	}
	return &Node{
		cfg:    cfg,
		log:    cfg.Log.With("node", cfg.Name),
		client: cfg.Client,
		fixed:  fixed,
		cidrCh: make(chan struct{}),
	}, nil
}

// ValidateLabels checks the labels a device gives its Node (--labels):
// valid keys and values (agentapi.ValidateLabels), and none of the labels
// the agent sets itself or only an admin gives. The flag's syntax is
// agentapi.ParseLabels.
func ValidateLabels(labels map[string]string) error {
	if err := agentapi.ValidateLabels(labels); err != nil {
		return fmt.Errorf("%w: %w (--labels)", ErrConfig, err)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		switch k {
		case api.LabelHostname, api.LabelArch, api.LabelOS:
			return fmt.Errorf("%w: label %s is set by the agent itself; remove it from --labels", ErrConfig, k)
		case api.LabelAutonomy:
			return fmt.Errorf("%w: label %s is an admin's decision, not the device's: give it to the join token (flotilla-hub token create --labels %s=true) or label the Node with kubectl; remove it from --labels", ErrConfig, k, k)
		}
		if k == api.LabelZone && labels[k] == api.SiteFleet {
			return fmt.Errorf("%w: site %s is reserved for the services every site serves; give %s another value (--labels)", ErrConfig, api.SiteFleet, k)
		}
	}
	return nil
}

// Name is the Node's name.
func (n *Node) Name() string { return n.cfg.Name }

// IP is the InternalIP the node reports (resolved now when not
// configured).
func (n *Node) IP() (string, error) {
	if n.cfg.NodeIP != "" {
		return n.cfg.NodeIP, nil
	}
	ip, err := DefaultRouteIP()
	if err != nil {
		return "", err
	}
	return ip.String(), nil
}

// Current is the newest Node seen (nil before registration).
func (n *Node) Current() *corev1.Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.last
}

// WaitForPodCIDR returns Node.spec.podCIDR once the hub has assigned one.
func (n *Node) WaitForPodCIDR(ctx context.Context) (string, error) {
	select {
	case <-n.cidrCh:
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.cidr, nil
	case <-ctx.Done():
		return "", fmt.Errorf("waiting for the hub to assign node %s a pod CIDR: %w", n.cfg.Name, ctx.Err())
	}
}

// PodCIDRChange waits until the hub's Node carries a pod CIDR other than
// have (a Node made again, after a new join or a hub restored from a
// backup, gets another) and returns it.
func (n *Node) PodCIDRChange(ctx context.Context, have string) (string, error) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		n.mu.Lock()
		cur := ""
		if n.last != nil {
			cur = n.last.Spec.PodCIDR
		}
		n.mu.Unlock()
		if cur != "" && cur != have {
			return cur, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-t.C:
		}
	}
}

// observe records a Node read from or written to the hub, if it is newer
// than what we have.
func (n *Node) observe(node *corev1.Node) {
	if node == nil || node.Name != n.cfg.Name {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.last != nil && n.last.UID == node.UID && olderRV(node.ResourceVersion, n.last.ResourceVersion) {
		return
	}
	n.last = node
	if node.Spec.PodCIDR != "" && n.cidr == "" {
		n.cidr = node.Spec.PodCIDR
		close(n.cidrCh)
	}
}

// forget drops the Node deleted on the hub, so that the next status tick
// registers it again.
func (n *Node) forget(node *corev1.Node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.last != nil && n.last.UID == node.UID {
		n.last = nil
	}
}

// olderRV says whether a is an older resourceVersion than b. The hub's
// resourceVersions are store revisions; anything else counts as newer,
// which only costs a redundant write.
func olderRV(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x < y
}

// Run registers the Node, then keeps its status and Lease current until
// ctx ends. It returns an error only for a machine it cannot describe;
// the hub being away is waited out.
func (n *Node) Run(ctx context.Context) error {
	info, err := n.cfg.Machine.Info()
	if err != nil {
		return fmt.Errorf("describing the machine: %w", err)
	}
	if err := n.register(ctx, info); err != nil {
		return nil // ctx ended
	}
	inf := n.informer()
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); inf.RunWithContext(ctx) }()
	go func() { defer wg.Done(); n.leaseLoop(ctx) }()
	go func() { defer wg.Done(); n.statusLoop(ctx, info) }()
	wg.Wait()
	return nil
}

func (n *Node) informer() cache.SharedIndexInformer {
	sel := fields.OneTermEqualSelector("metadata.name", n.cfg.Name).String()
	nodes := n.client.CoreV1().Nodes()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (kruntime.Object, error) {
			o.FieldSelector = sel
			return nodes.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return nodes.Watch(ctx, o)
		},
	}
	// The wrapper passes on whether the client can stream the initial
	// list (WatchList); client-go's fake cannot.
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, n.client), &corev1.Node{}, 0, cache.Indexers{})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { n.observe(asNode(o)) },
		UpdateFunc: func(_, o any) { n.observe(asNode(o)) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if node := asNode(o); node != nil {
				n.forget(node)
			}
		},
	})
	return inf
}

func asNode(o any) *corev1.Node {
	node, _ := o.(*corev1.Node)
	return node
}

// observation reads the machine for a status.
func (n *Node) observation(ctx context.Context, info SystemInfo) (observation, error) {
	stats, err := n.cfg.Machine.Stats(n.cfg.DataDir)
	if err != nil {
		return observation{}, err
	}
	ip, err := n.IP()
	if err != nil {
		return observation{}, err
	}
	o := observation{
		stats:       stats,
		capacity:    Capacity(stats, n.cfg.MaxPods),
		allocatable: Allocatable(stats, n.cfg.MaxPods),
		addresses:   []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
		port:        n.cfg.KubeletPort,
		nodeInfo: corev1.NodeSystemInfo{
			MachineID:               info.MachineID,
			BootID:                  info.BootID,
			KernelVersion:           info.KernelVersion,
			OSImage:                 info.OSImage,
			ContainerRuntimeVersion: n.cfg.RuntimeVersion,
			KubeletVersion:          n.cfg.AgentVersion,
			OperatingSystem:         info.OperatingSystem,
			Architecture:            info.Architecture,
		},
	}
	if info.Hostname != "" {
		o.addresses = append(o.addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: info.Hostname})
	}
	if n.cfg.Ready != nil {
		o.readyErr = n.cfg.Ready(ctx)
	}
	return o, nil
}

// register creates the Node, or adopts the existing one (merging only the
// labels and annotations the agent owns), retrying until it succeeds or
// ctx ends.
func (n *Node) register(ctx context.Context, info SystemInfo) error {
	b := newBackoff(200*time.Millisecond, n.cfg.StatusInterval)
	for {
		err := n.registerOnce(ctx, info)
		if err == nil {
			n.log.Info("node registered")
			return nil
		}
		n.log.Warn("registering the node failed; retrying", "err", err)
		if !b.wait(ctx) {
			return ctx.Err()
		}
	}
}

func (n *Node) registerOnce(ctx context.Context, info SystemInfo) error {
	o, err := n.observation(ctx, info)
	if err != nil {
		return err
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.cfg.Name}}
	mergeMeta(node, n.fixed, n.cfg.Labels, n.cfg.Annotations)
	node.Status, _ = desiredStatus(corev1.NodeStatus{}, o, metav1.NewTime(n.cfg.Now()))
	created, err := n.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err == nil {
		n.observe(created)
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating node %s: %w", n.cfg.Name, err)
	}
	cur, err := n.client.CoreV1().Nodes().Get(ctx, n.cfg.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the existing node %s: %w", n.cfg.Name, err)
	}
	upd := cur.DeepCopy()
	if mergeMeta(upd, n.fixed, n.cfg.Labels, n.cfg.Annotations) {
		if cur, err = n.client.CoreV1().Nodes().Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating the labels of node %s: %w", n.cfg.Name, err)
		}
	}
	n.observe(cur)
	return nil
}

func (n *Node) statusLoop(ctx context.Context, info SystemInfo) {
	t := time.NewTicker(n.cfg.StatusInterval)
	defer t.Stop()
	for {
		if err := n.syncStatus(ctx, info); err != nil && ctx.Err() == nil {
			n.log.Warn("updating the node status failed; retrying at the next tick", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// syncStatus writes the labels and status the agent owns when they differ
// from the hub's, or when the heartbeat is due.
func (n *Node) syncStatus(ctx context.Context, info SystemInfo) error {
	o, err := n.observation(ctx, info)
	if err != nil {
		return fmt.Errorf("reading the machine: %w", err)
	}
	nodes := n.client.CoreV1().Nodes()
	for attempt := 0; ; attempt++ {
		cur := n.Current()
		if cur == nil {
			n.log.Warn("the node was deleted on the hub; registering it again")
			return n.registerOnce(ctx, info)
		}
		var err error
		if upd := cur.DeepCopy(); mergeMeta(upd, n.fixed, n.cfg.Labels, n.cfg.Annotations) {
			if cur, err = nodes.Update(ctx, upd, metav1.UpdateOptions{}); err == nil {
				n.observe(cur)
			}
		}
		if err == nil {
			now := n.cfg.Now()
			st, changed := desiredStatus(cur.Status, o, metav1.NewTime(now))
			if !changed && now.Sub(heartbeat(&cur.Status)) < n.cfg.HeartbeatInterval {
				return nil
			}
			upd := cur.DeepCopy()
			upd.Status = st
			var res *corev1.Node
			if res, err = nodes.UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err == nil {
				n.observe(res)
				if changed {
					n.log.Debug("node status updated")
				}
				return nil
			}
		}
		switch {
		case apierrors.IsConflict(err) && attempt < 3:
			fresh, gerr := nodes.Get(ctx, n.cfg.Name, metav1.GetOptions{})
			if gerr != nil {
				return fmt.Errorf("re-reading node %s after a conflict: %w", n.cfg.Name, gerr)
			}
			n.observe(fresh)
		case apierrors.IsNotFound(err):
			n.log.Warn("the node was deleted on the hub; registering it again")
			return n.registerOnce(ctx, info)
		default:
			return fmt.Errorf("writing the status of node %s: %w", n.cfg.Name, err)
		}
	}
}

// backoff is a capped exponential backoff with jitter.
type backoff struct {
	cur, min, max time.Duration
}

func newBackoff(min, max time.Duration) *backoff {
	if max < min {
		max = min
	}
	return &backoff{cur: min, min: min, max: max}
}

// wait sleeps for the next delay; false when ctx ended.
func (b *backoff) wait(ctx context.Context) bool {
	d := b.cur/2 + rand.N(b.cur/2+1)
	b.cur *= 2
	if b.cur > b.max {
		b.cur = b.max
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (b *backoff) reset() { b.cur = b.min }
