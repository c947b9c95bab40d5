package simdevice

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"flotilla.dev/flotilla/agent/cni"
	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/agent/kubelet/kubelettest"
)

// simRuntime is the fake runtime with a device's behaviour: starting a
// container takes the ready delay, and the containers of pods that never
// get Ready (code 1) or that do batch work end as soon as they have
// started.
type simRuntime struct {
	*kubelettest.Runtime
	delay time.Duration
	// exitCode says whether a pod's containers end at once, and how; set
	// before the kubelet runs.
	exitCode func(podUID string) (int32, bool)
}

func (r *simRuntime) StartContainer(ctx context.Context, id string) error {
	if r.delay > 0 {
		t := time.NewTimer(r.delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	if err := r.Runtime.StartContainer(ctx, id); err != nil {
		return err
	}
	if r.exitCode != nil {
		// Before StartContainer returns, so that the kubelet never sees
		// the container running (and, with no readiness probe, Ready).
		if c, err := r.Runtime.ContainerStatus(ctx, id); err == nil {
			if code, exits := r.exitCode(c.Pod.UID); exits {
				_ = r.Runtime.Exit(id, code)
			}
		}
	}
	return nil
}

// fallbackPodCIDR is the pod network of a device whose Node has no pod
// CIDR when its first pod starts (no hub loop assigns them).
const fallbackPodCIDR = "10.244.0.0/16"

// simNetwork is the fake pod network on the Node's pod CIDR, read when
// the first pod is attached.
type simNetwork struct {
	client kubernetes.Interface
	node   string

	mu  sync.Mutex
	net *kubelettest.Network
}

func (n *simNetwork) network(ctx context.Context) *kubelettest.Network {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.net == nil {
		cidr := fallbackPodCIDR
		if node, err := n.client.CoreV1().Nodes().Get(ctx, n.node, metav1.GetOptions{}); err == nil && node.Spec.PodCIDR != "" {
			cidr = node.Spec.PodCIDR
		}
		nw, err := kubelettest.NewNetworkCIDR(cidr)
		if err != nil {
			nw, _ = kubelettest.NewNetworkCIDR(fallbackPodCIDR)
		}
		n.net = nw
	}
	return n.net
}

func (n *simNetwork) Setup(ctx context.Context, podID, netnsPath string, at cni.Attach) (net.IP, error) {
	return n.network(ctx).Setup(ctx, podID, netnsPath, at)
}

func (n *simNetwork) Teardown(ctx context.Context, podID, netnsPath string) error {
	n.mu.Lock()
	nw := n.net
	n.mu.Unlock()
	if nw == nil {
		return nil // nothing was ever attached
	}
	return nw.Teardown(ctx, podID, netnsPath)
}

// attached reports whether a pod on the device has the address.
func (n *simNetwork) attached(ip net.IP) bool {
	n.mu.Lock()
	nw := n.net
	n.mu.Unlock()
	if nw == nil {
		return false
	}
	for _, id := range nw.Attached() {
		if a, ok := nw.Attachment(id); ok && a.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// readyCounter counts the pods whose Ready status was written, once each.
type readyCounter struct {
	n    atomic.Int64
	mu   sync.Mutex
	uids map[types.UID]bool // pods counted and not yet deleted
}

func (c *readyCounter) wrote(p *corev1.Pod) {
	ready := false
	for _, cond := range p.Status.Conditions {
		ready = ready || (cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue)
	}
	if !ready {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.uids[p.UID] {
		c.uids[p.UID] = true
		c.n.Add(1)
	}
}

func (c *readyCounter) deleted(uid types.UID) {
	c.mu.Lock()
	delete(c.uids, uid)
	c.mu.Unlock()
}

// hubClient is the kubelet's client: it sees the pod status writes, for
// PodsReadied, and the deletions the kubelet finishes, which end a pod;
// while the device's link is down (SetRenewing(false)) its writes (pod
// statuses, deletions, Events) fail as if the hub could not be reached.
type hubClient struct {
	hubclient.Interface
	count *readyCounter
	link  *link
}

// link is a device's connection to the hub, as its writes see it.
type link struct {
	name string
	up   *atomic.Bool
}

func (l *link) check() error {
	if l.up.Load() {
		return nil
	}
	return fmt.Errorf("simulated device %s cannot reach the hub: %w", l.name, syscall.ECONNREFUSED)
}

func (c *hubClient) CoreV1() hubclient.CoreV1Interface {
	return hubCore{c.Interface.CoreV1(), c.count, c.link}
}

type hubCore struct {
	hubclient.CoreV1Interface
	count *readyCounter
	link  *link
}

func (c hubCore) Pods(namespace string) hubclient.PodInterface {
	return hubPods{c.CoreV1Interface.Pods(namespace), c.count, c.link}
}

func (c hubCore) Events(namespace string) hubclient.EventInterface {
	return hubEvents{c.CoreV1Interface.Events(namespace), c.link}
}

type hubPods struct {
	hubclient.PodInterface
	count *readyCounter
	link  *link
}

func (p hubPods) UpdateStatus(ctx context.Context, pod *corev1.Pod, opts metav1.UpdateOptions) (*corev1.Pod, error) {
	if err := p.link.check(); err != nil {
		return nil, err
	}
	out, err := p.PodInterface.UpdateStatus(ctx, pod, opts)
	if err == nil {
		p.count.wrote(out)
	}
	return out, err
}

func (p hubPods) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	if err := p.link.check(); err != nil {
		return err
	}
	err := p.PodInterface.Delete(ctx, name, opts)
	if (err == nil || apierrors.IsNotFound(err)) && opts.Preconditions != nil && opts.Preconditions.UID != nil {
		p.count.deleted(*opts.Preconditions.UID)
	}
	return err
}

// hubEvents fails the event writes of a device whose link is down.
type hubEvents struct {
	hubclient.EventInterface
	link *link
}

func (e hubEvents) Create(ctx context.Context, ev *corev1.Event, opts metav1.CreateOptions) (*corev1.Event, error) {
	if err := e.link.check(); err != nil {
		return nil, err
	}
	return e.EventInterface.Create(ctx, ev, opts)
}

func (e hubEvents) Update(ctx context.Context, ev *corev1.Event, opts metav1.UpdateOptions) (*corev1.Event, error) {
	if err := e.link.check(); err != nil {
		return nil, err
	}
	return e.EventInterface.Update(ctx, ev, opts)
}

func (e hubEvents) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Event, error) {
	if err := e.link.check(); err != nil {
		return nil, err
	}
	return e.EventInterface.Patch(ctx, name, pt, data, opts, subresources...)
}
