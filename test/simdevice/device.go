package simdevice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api"
)

// Config describes one simulated device.
type Config struct {
	// Name of the Node; required.
	Name   string
	Labels map[string]string
	Taints []corev1.Taint
	// Capacity; default 4 CPUs, 8 GiB, 110 pods.
	Capacity corev1.ResourceList
	// ReadyDelay is how long a bound pod takes to become Running and Ready
	// [200ms].
	ReadyDelay time.Duration
	// RenewInterval of the Lease [10s, as the kubelet]; LeaseDuration [40s].
	RenewInterval time.Duration
	LeaseDuration time.Duration
	// NeverReady picks pods that start but never pass their readiness
	// probe (a broken release).
	NeverReady func(*corev1.Pod) bool
	Logger     *slog.Logger
}

// Device is one simulated device.
type Device struct {
	cfg    Config
	client kubernetes.Interface
	log    *slog.Logger
	// renew can be switched off to simulate a lost link.
	renew      atomic.Bool
	registered atomic.Bool
	nextIP     atomic.Uint32
	readied    atomic.Int64

	mu     sync.Mutex
	prefix netip.Prefix
}

// New returns a device; Run brings it to life.
func New(client kubernetes.Interface, cfg Config) (*Device, error) {
	if cfg.Name == "" {
		return nil, errors.New("simdevice: Config.Name is required")
	}
	if cfg.Capacity == nil {
		cfg.Capacity = corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("8Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
	}
	if cfg.ReadyDelay == 0 {
		cfg.ReadyDelay = 200 * time.Millisecond
	}
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = 10 * time.Second
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 40 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	d := &Device{cfg: cfg, client: client, log: cfg.Logger.With("device", cfg.Name)}
	d.renew.Store(true)
	return d, nil
}

// Name is the device's Node name.
func (d *Device) Name() string { return d.cfg.Name }

// SetRenewing turns Lease renewal on or off (off: the device looks gone
// to the hub while its pods keep their state).
func (d *Device) SetRenewing(on bool) { d.renew.Store(on) }

// PodsReadied counts pods this device has made Ready.
func (d *Device) PodsReadied() int64 { return d.readied.Load() }

// Register creates or refreshes the Node, its Ready status and its Lease.
func (d *Device) Register(ctx context.Context) error {
	labels := map[string]string{api.LabelHostname: d.cfg.Name, api.LabelOS: "linux", api.LabelArch: "amd64"}
	for k, v := range d.cfg.Labels {
		labels[k] = v
	}
	nodes := d.client.CoreV1().Nodes()
	n, err := nodes.Get(ctx, d.cfg.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		n, err = nodes.Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: d.cfg.Name, Labels: labels},
			Spec:       corev1.NodeSpec{Taints: d.cfg.Taints},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("register node %s: %w", d.cfg.Name, err)
		}
	case err != nil:
		return fmt.Errorf("read node %s: %w", d.cfg.Name, err)
	}
	// The hub writes the node too (pod CIDR, taints): retry on conflict
	// with a fresh read, as the kubelet does.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if n == nil {
			var err error
			if n, err = nodes.Get(ctx, d.cfg.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		now := metav1.Now()
		n.Status.Capacity = d.cfg.Capacity
		n.Status.Allocatable = d.cfg.Capacity
		n.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "simulated device is ready", LastHeartbeatTime: now, LastTransitionTime: now,
		}}
		n.Status.NodeInfo = corev1.NodeSystemInfo{Architecture: "amd64", OperatingSystem: "linux", KubeletVersion: "simdevice"}
		out, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if err != nil {
			n = nil
			return err
		}
		n = out
		return nil
	})
	if err != nil {
		return fmt.Errorf("node %s status: %w", d.cfg.Name, err)
	}
	d.registered.Store(true)
	return d.renewLease(ctx, n)
}

func (d *Device) renewLease(ctx context.Context, n *corev1.Node) error {
	leases := d.client.CoordinationV1().Leases(api.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, d.cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: d.cfg.Name, Namespace: api.NamespaceNodeLease},
			Spec: coordv1.LeaseSpec{
				HolderIdentity:       ptr.To(d.cfg.Name),
				LeaseDurationSeconds: ptr.To(int32(d.cfg.LeaseDuration / time.Second)),
				RenewTime:            &now,
			},
		}
		if n != nil {
			// As the kubelet does: the Lease goes with its Node.
			l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}
		}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create lease %s: %w", d.cfg.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("read lease %s: %w", d.cfg.Name, err)
	}
	l.Spec.RenewTime = &now
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renew lease %s: %w", d.cfg.Name, err)
	}
	return nil
}

// Run registers the device (unless Register already did) and plays it
// until ctx ends.
func (d *Device) Run(ctx context.Context) error {
	if !d.registered.Load() {
		if err := d.Register(ctx); err != nil {
			return err
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(d.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", d.cfg.Name).String()
		}))
	podInf := factory.Core().V1().Pods()
	lister := podInf.Lister()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	enqueue := func(obj any) {
		if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			queue.Add(k)
		}
	}
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, cur any) { enqueue(cur) },
	}); err != nil {
		return fmt.Errorf("device %s pod informer: %w", d.cfg.Name, err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()

	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				key, quit := queue.Get()
				if quit {
					return
				}
				if err := d.syncPod(ctx, lister, key, queue); err != nil && ctx.Err() == nil {
					d.log.Debug("pod sync failed, retrying", "pod", key, "err", err)
					queue.AddRateLimited(key)
				} else {
					queue.Forget(key)
				}
				queue.Done(key)
			}
		}()
	}
	t := time.NewTicker(d.cfg.RenewInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			queue.ShutDown()
			wg.Wait()
			return nil
		case <-t.C:
			if d.renew.Load() {
				if err := d.renewLease(ctx, nil); err != nil && ctx.Err() == nil {
					d.log.Debug("lease renewal failed", "err", err)
				}
			}
		}
	}
}

// syncPod plays the agent for one pod: confirm a deletion, or after the
// ready delay report it Running and (unless broken) Ready.
func (d *Device) syncPod(ctx context.Context, lister corelisters.PodLister, key string, q workqueue.TypedRateLimitingInterface[string]) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pod.DeletionTimestamp != nil {
		err := d.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &pod.UID},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	}
	if pod.Status.Phase == corev1.PodRunning {
		return nil
	}
	if age := time.Since(pod.CreationTimestamp.Time); age < d.cfg.ReadyDelay {
		q.AddAfter(key, d.cfg.ReadyDelay-age)
		return nil
	}
	ready := d.cfg.NeverReady == nil || !d.cfg.NeverReady(pod)
	now := metav1.Now()
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionFalse
	}
	cp := pod.DeepCopy()
	cp.Status.Phase = corev1.PodRunning
	cp.Status.HostIP = "192.0.2.1"
	ip := d.podIP(ctx)
	cp.Status.PodIP = ip
	cp.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	cp.Status.StartTime = &now
	cp.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: st, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: st, LastTransitionTime: now},
	}
	cp.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		cp.Status.ContainerStatuses = append(cp.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: ready, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	if _, err := d.client.CoreV1().Pods(ns).UpdateStatus(ctx, cp, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	if ready {
		d.readied.Add(1)
	}
	return nil
}

// podIP hands out addresses from the node's pod CIDR (once the hub has
// assigned one), else from 10.244.0.0/16.
func (d *Device) podIP(ctx context.Context) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.prefix.IsValid() {
		d.prefix = netip.MustParsePrefix("10.244.0.0/16")
		if n, err := d.client.CoreV1().Nodes().Get(ctx, d.cfg.Name, metav1.GetOptions{}); err == nil && n.Spec.PodCIDR != "" {
			if p, err := netip.ParsePrefix(n.Spec.PodCIDR); err == nil && p.Addr().Is4() {
				d.prefix = p.Masked()
			}
		}
	}
	i := d.nextIP.Add(1) + 1
	a := d.prefix.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += i
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).String()
}

// Fleet runs devices until ctx ends.
type Fleet struct {
	Devices []*Device
	wg      sync.WaitGroup
	errs    chan error
}

// StartFleet registers every device and runs it in the background; Wait
// returns once ctx has ended and they have stopped.
func StartFleet(ctx context.Context, client kubernetes.Interface, cfgs []Config) (*Fleet, error) {
	f := &Fleet{errs: make(chan error, len(cfgs))}
	for _, cfg := range cfgs {
		d, err := New(client, cfg)
		if err != nil {
			return nil, err
		}
		if err := d.Register(ctx); err != nil {
			return nil, err
		}
		f.Devices = append(f.Devices, d)
	}
	for _, d := range f.Devices {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			if err := d.Run(ctx); err != nil {
				f.errs <- err
			}
		}()
	}
	return f, nil
}

// Wait waits for the devices to stop and returns their errors.
func (f *Fleet) Wait() error {
	f.wg.Wait()
	close(f.errs)
	var errs []error
	for err := range f.errs {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Named returns n device configs "<prefix>-0".."<prefix>-(n-1)", each
// modified by mod when not nil.
func Named(prefix string, n int, mod func(i int, c *Config)) []Config {
	out := make([]Config, n)
	for i := range out {
		out[i] = Config{Name: fmt.Sprintf("%s-%d", prefix, i)}
		if mod != nil {
			mod(i, &out[i])
		}
	}
	return out
}
