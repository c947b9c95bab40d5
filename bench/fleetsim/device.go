package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/api"
)

// Device is one simulated device.
type Device struct {
	name, site string
	hostIP     string
	// localAddr is the address it connects to the hub from (none: any).
	localAddr  netip.Addr
	client     hubclient.Interface
	leaseEvery time.Duration
	log        *slog.Logger

	// watching counts the device's watches that are open now.
	watching atomic.Int32
	// reconnects counts watches opened again after one ended.
	reconnects atomic.Int64
	// reportingReady: a goroutine reports the Node Ready again.
	reportingReady atomic.Bool

	mu       sync.Mutex
	podCIDR  netip.Prefix
	nextIP   netip.Addr
	firstSaw map[types.UID]time.Time // when each pod first reached the watch
	reported map[types.UID]bool
	slices   map[string]string // namespace/name -> its site label
	services map[string]bool
}

// Name is the device's Node name.
func (d *Device) Name() string { return d.name }

// Site is the device's site ("" for none).
func (d *Device) Site() string { return d.site }

// Watching is how many of its watches are open (3 when all are).
func (d *Device) Watching() int { return int(d.watching.Load()) }

// Reconnects counts watches opened again after one ended.
func (d *Device) Reconnects() int64 { return d.reconnects.Load() }

// SawPod is when the pod with uid first reached the device's watch.
func (d *Device) SawPod(uid types.UID) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.firstSaw[uid]
	return t, ok
}

// Pods is how many distinct pods reached the device's watch.
func (d *Device) Pods() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.firstSaw)
}

// SliceSites are the site labels of the EndpointSlices the device holds.
func (d *Device) SliceSites() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{}
	for _, s := range d.slices {
		out[s]++
	}
	return out
}

// Services is how many Services the device holds.
func (d *Device) Services() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.services)
}

// register reports the Node Ready with its address and capacity, and
// waits for the hub to give it a pod CIDR.
func (d *Device) register(ctx context.Context) error {
	nodes := d.client.CoreV1().Nodes()
	err := retry.OnError(retry.DefaultBackoff, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsTooManyRequests(err)
	}, func() error {
		n, err := nodes.Get(ctx, d.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("110")}
		n.Status.Capacity, n.Status.Allocatable = capacity, capacity
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", Message: "simulated device", LastHeartbeatTime: now, LastTransitionTime: now}}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: d.hostIP}}
		n.Status.NodeInfo = corev1.NodeSystemInfo{Architecture: "amd64", OperatingSystem: "linux", KubeletVersion: "fleetsim"}
		_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("device %s: reporting its Node: %w", d.name, err)
	}
	// The pod CIDR comes soon after the Node; asked again with backoff, so
	// that a fleet joining at once does not poll the hub in a storm.
	wait := 200 * time.Millisecond
	for {
		n, err := nodes.Get(ctx, d.name, metav1.GetOptions{})
		if err == nil && n.Spec.PodCIDR != "" {
			p, err := netip.ParsePrefix(n.Spec.PodCIDR)
			if err != nil {
				return fmt.Errorf("device %s: pod CIDR %q: %w", d.name, n.Spec.PodCIDR, err)
			}
			d.mu.Lock()
			d.podCIDR, d.nextIP = p, p.Addr().Next().Next()
			d.mu.Unlock()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// Watches is how many watches a device keeps: its Node, its pods, the
// Services and its site's EndpointSlices.
const Watches = 4

// run keeps the Lease and the watches until ctx ends.
func (d *Device) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1 + Watches)
	go func() {
		defer wg.Done()
		// Its own Node, as an agent watches it: a Ready condition the hub
		// turned Unknown (a Lease late under load) is reported again.
		nodes := d.client.CoreV1().Nodes()
		sel := fields.OneTermEqualSelector("metadata.name", d.name).String()
		d.follow(ctx,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.FieldSelector = sel
				return nodes.List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = sel
				return nodes.Watch(ctx, o)
			}, nil, func(_ watch.EventType, obj runtime.Object) { d.nodeEvent(ctx, obj) })
	}()
	go func() { defer wg.Done(); d.renewLeases(ctx) }()
	go func() {
		defer wg.Done()
		pods := d.client.CoreV1().Pods(metav1.NamespaceAll)
		sel := fields.OneTermEqualSelector("spec.nodeName", d.name).String()
		d.follow(ctx,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.FieldSelector = sel
				return pods.List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = sel
				return pods.Watch(ctx, o)
			}, nil, d.podEvent)
	}()
	go func() {
		defer wg.Done()
		svcs := d.client.CoreV1().Services(metav1.NamespaceAll)
		d.follow(ctx,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return svcs.List(ctx, o) },
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return svcs.Watch(ctx, o) },
			func() { d.mu.Lock(); clear(d.services); d.mu.Unlock() }, d.serviceEvent)
	}()
	go func() {
		defer wg.Done()
		sel, err := api.SiteSelector(d.site)
		if err != nil {
			d.log.Error("no slice watch", "err", err)
			return
		}
		slices := d.client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll)
		d.follow(ctx,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = sel.String()
				return slices.List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = sel.String()
				return slices.Watch(ctx, o)
			}, func() { d.mu.Lock(); clear(d.slices); d.mu.Unlock() }, d.sliceEvent)
	}()
	wg.Wait()
}

// renewLeases renews the device's Lease every leaseEvery, the first at a
// random point of the period so that a fleet started at once does not
// renew in step.
func (d *Device) renewLeases(ctx context.Context) {
	leases := d.client.CoordinationV1().Leases(api.NamespaceNodeLease)
	wait := time.Duration(rand.Int64N(int64(d.leaseEvery)))
	// As an agent's (agent/node): a failed renewal is tried again from
	// 200 ms on, doubling up to the period, not a whole period later —
	// four periods missed make the hub mark the device unreachable.
	retryIn := 200 * time.Millisecond
	var lease *coordv1.Lease
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if err := d.renewLease(ctx, leases, &lease); err != nil {
			wait = retryIn/2 + rand.N(retryIn)
			retryIn = min(2*retryIn, d.leaseEvery)
			continue
		}
		wait, retryIn = d.leaseEvery, 200*time.Millisecond
	}
}

// renewLease writes a new renewTime on *lease, reading or creating the
// Lease first when *lease is nil; on failure *lease is nil (read again).
func (d *Device) renewLease(ctx context.Context, leases hubclient.LeaseInterface, lease **coordv1.Lease) error {
	now := metav1.NewMicroTime(time.Now())
	var err error
	if *lease == nil {
		*lease, err = leases.Get(ctx, d.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			*lease, err = leases.Create(ctx, &coordv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: d.name, Namespace: api.NamespaceNodeLease},
				Spec: coordv1.LeaseSpec{HolderIdentity: ptr.To(d.name),
					LeaseDurationSeconds: ptr.To(int32(4 * d.leaseEvery / time.Second)), RenewTime: &now},
			}, metav1.CreateOptions{})
		}
		if err != nil {
			*lease = nil
			return err
		}
	}
	(*lease).Spec.RenewTime = &now
	if *lease, err = leases.Update(ctx, *lease, metav1.UpdateOptions{}); err != nil {
		*lease = nil
	}
	return err
}

type (
	listFunc  func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watchFunc func(context.Context, metav1.ListOptions) (watch.Interface, error)
)

// follow lists, then watches from the list's resourceVersion and on from
// the last event's, as an informer does: a watch that ends is opened
// again where it stopped; only a 410 (the hub no longer has that version)
// lists again (reset, when set, forgets what the last list gave).
// Failures back off with jitter, up to 30 s.
func (d *Device) follow(ctx context.Context, list listFunc, watchFn watchFunc, reset func(), handle func(watch.EventType, runtime.Object)) {
	rv := ""
	backoff := time.Second
	pause := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff/2 + time.Duration(rand.Int64N(int64(backoff)))):
		}
		backoff = min(2*backoff, 30*time.Second)
		return true
	}
	opened := false
	for ctx.Err() == nil {
		if rv == "" {
			obj, err := list(ctx, metav1.ListOptions{})
			if err != nil {
				if !pause() {
					return
				}
				continue
			}
			items, _ := meta.ExtractList(obj)
			if reset != nil {
				reset()
			}
			for _, it := range items {
				handle(watch.Added, it)
			}
			lm, _ := meta.ListAccessor(obj)
			rv = lm.GetResourceVersion()
		}
		w, err := watchFn(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
				continue
			}
			if !pause() {
				return
			}
			continue
		}
		if opened {
			d.reconnects.Add(1)
		}
		opened = true
		d.watching.Add(1)
		rv = d.drain(w, rv, handle)
		d.watching.Add(-1)
		backoff = time.Second
	}
}

// drain handles w's events until it ends and returns the resourceVersion
// to resume from ("" to list again).
func (d *Device) drain(w watch.Interface, rv string, handle func(watch.EventType, runtime.Object)) string {
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			if st, ok := ev.Object.(*metav1.Status); ok && (st.Code == 410 || st.Reason == metav1.StatusReasonExpired || st.Reason == metav1.StatusReasonGone) {
				return ""
			}
			return rv
		}
		if m, err := meta.Accessor(ev.Object); err == nil {
			rv = m.GetResourceVersion()
		}
		if ev.Type != watch.Bookmark {
			handle(ev.Type, ev.Object)
		}
	}
	return rv
}

// nodeEvent reports the device Ready again when the hub says otherwise.
func (d *Device) nodeEvent(ctx context.Context, obj runtime.Object) {
	n, ok := obj.(*corev1.Node)
	if !ok || nodeReady(n) {
		return
	}
	if d.reportingReady.CompareAndSwap(false, true) {
		go d.reportReady(ctx)
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// reportReady reports the Node Ready again until it is, as a kubelet
// keeps reporting its status: a write refused under load (429, a
// conflict with the hub's own taints) is tried again, not left for an
// event that may never come.
func (d *Device) reportReady(ctx context.Context) {
	defer d.reportingReady.Store(false)
	nodes := d.client.CoreV1().Nodes()
	wait := 200 * time.Millisecond
	for {
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			n, err := nodes.Get(ctx, d.name, metav1.GetOptions{})
			if err != nil || nodeReady(n) {
				return err
			}
			now := metav1.Now()
			ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
				Reason: "KubeletReady", Message: "simulated device", LastHeartbeatTime: now, LastTransitionTime: now}
			set := false
			for i, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					n.Status.Conditions[i], set = ready, true
				}
			}
			if !set {
				n.Status.Conditions = append(n.Status.Conditions, ready)
			}
			_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait/2 + rand.N(wait)):
		}
		wait = min(2*wait, 10*time.Second)
	}
}

func (d *Device) podEvent(typ watch.EventType, obj runtime.Object) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	d.mu.Lock()
	if _, seen := d.firstSaw[pod.UID]; !seen {
		d.firstSaw[pod.UID] = time.Now()
	}
	report := typ != watch.Deleted && !d.reported[pod.UID] && pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodRunning
	if report {
		d.reported[pod.UID] = true
	}
	d.mu.Unlock()
	if report {
		go d.reportRunning(pod.DeepCopy())
	}
}

// reportRunning writes the pod's status as an agent does once its
// containers run and are ready.
func (d *Device) reportRunning(pod *corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d.mu.Lock()
	ip := d.nextIP
	if d.podCIDR.Contains(ip.Next()) {
		d.nextIP = ip.Next()
	}
	d.mu.Unlock()
	now := metav1.Now()
	pods := d.client.CoreV1().Pods(pod.Namespace)
	// Written again until the hub takes it (within the context's two
	// minutes): under load a write may be refused (429) or time out.
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 30, Cap: 10 * time.Second}
	err := retry.OnError(backoff, func(err error) bool { return !apierrors.IsNotFound(err) && ctx.Err() == nil }, func() error {
		st := corev1.PodStatus{Phase: corev1.PodRunning, HostIP: d.hostIP, HostIPs: []corev1.HostIP{{IP: d.hostIP}},
			PodIP: ip.String(), PodIPs: []corev1.PodIP{{IP: ip.String()}}, StartTime: &now}
		for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
			st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
		}
		for _, c := range pod.Spec.Containers {
			st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true,
				Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
		}
		pod.Status = st
		_, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if fresh, gerr := pods.Get(ctx, pod.Name, metav1.GetOptions{}); gerr == nil {
				pod = fresh
			}
		}
		return err
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		d.log.Warn("reporting a pod failed", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		// Its next event reports it again.
		d.mu.Lock()
		delete(d.reported, pod.UID)
		d.mu.Unlock()
	}
}

func (d *Device) serviceEvent(typ watch.EventType, obj runtime.Object) {
	if _, ok := obj.(*corev1.Service); !ok {
		return
	}
	m, _ := meta.Accessor(obj)
	d.mu.Lock()
	defer d.mu.Unlock()
	key := m.GetNamespace() + "/" + m.GetName()
	if typ == watch.Deleted {
		delete(d.services, key)
		return
	}
	d.services[key] = true
}

func (d *Device) sliceEvent(typ watch.EventType, obj runtime.Object) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	key := s.Namespace + "/" + s.Name
	if typ == watch.Deleted {
		delete(d.slices, key)
		return
	}
	d.slices[key] = s.Labels[api.LabelSite]
}
