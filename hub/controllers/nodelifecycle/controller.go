package nodelifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/internal/controlloop"
)

// Config holds every figure of the loop; zero fields take the defaults in
// brackets.
type Config struct {
	// ClusterCIDR are the ranges node pod CIDRs are cut from, in order,
	// comma-separated [api.ClusterCIDRs: 10.42.0.0/16,10.64.0.0/10].
	ClusterCIDR string
	// NodeCIDRMaskSize is the size of each node's pod CIDR [24].
	NodeCIDRMaskSize int
	// GracePeriod is how long a node may go without renewing its Lease (or
	// posting status) before it is Unknown [40s]. It is also how long after
	// the controller starts before any node is marked or any pod evicted.
	GracePeriod time.Duration
	// MonitorPeriod is how often node health is checked [5s].
	MonitorPeriod time.Duration
	// DisruptionThreshold: when more than this fraction of nodes is
	// unreachable at once, no pod is evicted [0.55].
	DisruptionThreshold float64
	// LeaseNamespace holds the node Leases [kube-node-lease].
	LeaseNamespace string
	// Recorder receives events [controlloop.NewRecorder].
	Recorder record.EventRecorder
	// Clock is injectable for tests [real clock].
	Clock  clock.WithTicker
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.ClusterCIDR == "" {
		c.ClusterCIDR = api.ClusterCIDRs
	}
	if c.NodeCIDRMaskSize == 0 {
		c.NodeCIDRMaskSize = 24
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = 40 * time.Second
	}
	if c.MonitorPeriod == 0 {
		c.MonitorPeriod = 5 * time.Second
	}
	if c.DisruptionThreshold == 0 {
		c.DisruptionThreshold = 0.55
	}
	if c.LeaseNamespace == "" {
		c.LeaseNamespace = api.NamespaceNodeLease
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

const podsByNodeIndex = "nodelifecycle/spec.nodeName"

// Controller gives nodes their pod CIDR and watches their health.
type Controller struct {
	client   kubernetes.Interface
	factory  informers.SharedInformerFactory
	cfg      Config
	log      *slog.Logger
	recorder record.EventRecorder
	clock    clock.WithTicker

	nodeLister  corelisters.NodeLister
	leaseLister coordlisters.LeaseLister
	podIndexer  cache.Indexer
	synced      []cache.InformerSynced

	ipam   *controlloop.Loop
	cidrMu sync.Mutex
	cidrs  *cidrSet

	// Owned by the monitor goroutine.
	start   time.Time
	health  map[string]*nodeHealth
	primed  bool // health holds every node seen in a pass
	disrupt bool
}

// New returns a Controller fed by factory's node, lease and pod informers.
// Run starts the factory, so it may be shared with other loops.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, cfg Config) (*Controller, error) {
	cfg = cfg.withDefaults()
	if cfg.GracePeriod < 0 || cfg.MonitorPeriod < 0 {
		return nil, fmt.Errorf("node lifecycle config: GracePeriod %s and MonitorPeriod %s must be positive", cfg.GracePeriod, cfg.MonitorPeriod)
	}
	if cfg.DisruptionThreshold <= 0 || cfg.DisruptionThreshold > 1 {
		return nil, fmt.Errorf("node lifecycle config: DisruptionThreshold %v must be in (0, 1]", cfg.DisruptionThreshold)
	}
	cidrs, err := newCIDRSet(cfg.ClusterCIDR, cfg.NodeCIDRMaskSize)
	if err != nil {
		return nil, fmt.Errorf("node lifecycle config: %w", err)
	}
	c := &Controller{
		client:   client,
		factory:  factory,
		cfg:      cfg,
		log:      cfg.Logger.With("controller", "nodelifecycle"),
		recorder: cfg.Recorder,
		clock:    cfg.Clock,
		cidrs:    cidrs,
		health:   map[string]*nodeHealth{},
	}
	c.ipam = controlloop.New("nodeipam", c.reconcileCIDR, controlloop.Options{Logger: cfg.Logger})

	nodes := factory.Core().V1().Nodes()
	leases := factory.Coordination().V1().Leases()
	pods := factory.Core().V1().Pods()
	c.nodeLister = nodes.Lister()
	c.leaseLister = leases.Lister()
	podInf := pods.Informer()
	if err := podInf.AddIndexers(cache.Indexers{podsByNodeIndex: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, fmt.Errorf("node lifecycle: pod index: %w", err)
	}
	c.podIndexer = podInf.GetIndexer()

	reg, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onNode,
		UpdateFunc: func(_, obj any) { c.onNode(obj) },
		DeleteFunc: c.onNodeDelete,
	})
	if err != nil {
		return nil, fmt.Errorf("node lifecycle: node handler: %w", err)
	}
	// The handler's own sync, not just the informer's: every existing
	// node's CIDR must be recorded before the first allocation.
	c.ipam.WaitFor(reg.HasSynced)
	c.synced = []cache.InformerSynced{reg.HasSynced, leases.Informer().HasSynced, podInf.HasSynced}
	return c, nil
}

// Run allocates CIDRs and monitors nodes until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	if c.recorder == nil {
		rec, stop := controlloop.NewRecorder(ctx, c.client, "node-controller")
		defer stop()
		c.recorder = rec
	}
	c.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return nil
	}
	c.start = c.clock.Now()
	c.log.Info("node lifecycle started", "gracePeriod", c.cfg.GracePeriod, "clusterCIDR", c.cfg.ClusterCIDR)

	errc := make(chan error, 1)
	go func() { errc <- c.ipam.Run(ctx, 1) }()

	t := c.clock.NewTicker(c.cfg.MonitorPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return <-errc
		case <-t.C():
			if err := c.monitor(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("node health pass incomplete, next pass retries", "err", err)
			}
		}
	}
}

// onNode records a CIDR read back from a Node (so it is never handed out
// again) and queues nodes that still need one.
func (c *Controller) onNode(obj any) {
	node, ok := controlloop.Deleted[*corev1.Node](obj)
	if !ok {
		return
	}
	if node.Spec.PodCIDR == "" {
		c.ipam.EnqueueKey(node.Name)
		return
	}
	c.cidrMu.Lock()
	err := c.cidrs.occupy(node.Spec.PodCIDR, node.Name)
	c.cidrMu.Unlock()
	if err != nil {
		// Set by hand or by an earlier configuration: the node keeps it
		// (spec.podCIDR cannot change), but say so loudly.
		c.log.Warn("node pod CIDR not usable", "node", node.Name, "err", err)
	}
	if node.Annotations[api.AnnotationClusterCIDRs] != c.cidrs.String() {
		c.ipam.EnqueueKey(node.Name)
	}
}

func (c *Controller) onNodeDelete(obj any) {
	node, ok := controlloop.Deleted[*corev1.Node](obj)
	if !ok || node.Spec.PodCIDR == "" {
		return
	}
	c.cidrMu.Lock()
	c.cidrs.release(node.Spec.PodCIDR, node.Name)
	c.cidrMu.Unlock()
	// A node that waited for a CIDR may now get this one.
	nodes, err := c.nodeLister.List(labelsEverything)
	if err != nil {
		return
	}
	for _, n := range nodes {
		if n.Spec.PodCIDR == "" {
			c.ipam.EnqueueKey(n.Name)
		}
	}
}

// reconcileCIDR gives a node without a pod CIDR the next free one.
func (c *Controller) reconcileCIDR(ctx context.Context, name string) error {
	node, err := c.nodeLister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	ranges := c.cidrs.String()
	if node.Spec.PodCIDR != "" {
		if node.Annotations[api.AnnotationClusterCIDRs] == ranges {
			return nil
		}
		// Tell the device the fleet's pod ranges (a Node from before they
		// were announced, or the ranges changed).
		node = node.DeepCopy()
		metav1.SetMetaDataAnnotation(&node.ObjectMeta, api.AnnotationClusterCIDRs, ranges)
		if _, err := c.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("node %s: announcing the cluster CIDRs: %w", name, err)
		}
		return nil
	}
	c.cidrMu.Lock()
	p, err := c.cidrs.allocate(name)
	c.cidrMu.Unlock()
	if err != nil {
		c.recorder.Eventf(node, corev1.EventTypeWarning, "CIDRNotAvailable", "Node %s status is now: CIDRNotAvailable (%v)", name, err)
		if cerr := c.setNetworkUnavailable(ctx, node, err); cerr != nil {
			c.log.Warn("writing the NetworkUnavailable condition", "node", name, "err", cerr)
		}
		return fmt.Errorf("node %s: %w", name, err)
	}
	node = node.DeepCopy()
	node.Spec.PodCIDR = p.String()
	node.Spec.PodCIDRs = []string{p.String()}
	metav1.SetMetaDataAnnotation(&node.ObjectMeta, api.AnnotationClusterCIDRs, ranges)
	updated, err := c.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	if err != nil {
		c.cidrMu.Lock()
		c.cidrs.release(p.String(), name)
		c.cidrMu.Unlock()
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("node %s: writing pod CIDR %s: %w", name, p, err)
	}
	c.log.Info("pod CIDR assigned", "node", name, "podCIDR", p.String())
	c.recorder.Eventf(node, corev1.EventTypeNormal, "CIDRAssignmentSucceeded", "Node %s was given pod CIDR %s", name, p)
	if cerr := c.setNetworkUnavailable(ctx, updated, nil); cerr != nil {
		c.log.Warn("clearing the NetworkUnavailable condition", "node", name, "err", cerr)
	}
	return nil
}

// setNetworkUnavailable records on the Node why it has no pod network
// (cause, a full pool), or that it has one again (cause nil, only where
// the condition was set): a device waiting for a pod CIDR says so in
// kubectl describe node, not only in an Event that expires.
func (c *Controller) setNetworkUnavailable(ctx context.Context, node *corev1.Node, cause error) error {
	cond := corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: "CIDRAssigned",
		Message: "the node has a pod CIDR: " + node.Spec.PodCIDR}
	if cause != nil {
		cond.Status, cond.Reason, cond.Message = corev1.ConditionTrue, "CIDRNotAvailable", cause.Error()
	}
	i := slices.IndexFunc(node.Status.Conditions, func(x corev1.NodeCondition) bool { return x.Type == cond.Type })
	if i < 0 && cause == nil {
		return nil
	}
	if i >= 0 && node.Status.Conditions[i].Status == cond.Status && node.Status.Conditions[i].Message == cond.Message {
		return nil
	}
	node = node.DeepCopy()
	now := metav1.NewTime(c.clock.Now())
	cond.LastHeartbeatTime, cond.LastTransitionTime = now, now
	if i >= 0 {
		if node.Status.Conditions[i].Status == cond.Status {
			cond.LastTransitionTime = node.Status.Conditions[i].LastTransitionTime
		}
		node.Status.Conditions[i] = cond
	} else {
		node.Status.Conditions = append(node.Status.Conditions, cond)
	}
	_, err := c.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

var errPass = errors.New("some nodes or pods could not be updated")
