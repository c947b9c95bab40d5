package simdevice

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"flotilla.dev/flotilla/agent/cni"
	"flotilla.dev/flotilla/agent/kubelet/kubelettest"
)

// simRuntime is the fake runtime with a device's behaviour: starting a
// container takes the ready delay, and the containers of pods that never
// get Ready exit with code 1 as soon as they have started.
type simRuntime struct {
	*kubelettest.Runtime
	delay time.Duration
	// neverReady is set before the kubelet runs.
	neverReady func(podUID string) bool
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
	if r.neverReady != nil {
		// Before StartContainer returns, so that the kubelet never sees
		// the container running (and, with no readiness probe, Ready).
		if c, err := r.Runtime.ContainerStatus(ctx, id); err == nil && r.neverReady(c.Pod.UID) {
			_ = r.Runtime.Exit(id, 1)
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

// readyClient is the hub client the kubelet gets: it sees the pod status
// writes, for PodsReadied, and the final deletes, which end a pod.
type readyClient struct {
	kubernetes.Interface
	count *readyCounter
}

func (c *readyClient) CoreV1() typedcorev1.CoreV1Interface {
	return readyCore{c.Interface.CoreV1(), c.count}
}

type readyCore struct {
	typedcorev1.CoreV1Interface
	count *readyCounter
}

func (c readyCore) Pods(namespace string) typedcorev1.PodInterface {
	return readyPods{c.CoreV1Interface.Pods(namespace), c.count}
}

type readyPods struct {
	typedcorev1.PodInterface
	count *readyCounter
}

func (p readyPods) UpdateStatus(ctx context.Context, pod *corev1.Pod, opts metav1.UpdateOptions) (*corev1.Pod, error) {
	out, err := p.PodInterface.UpdateStatus(ctx, pod, opts)
	if err == nil {
		p.count.wrote(out)
	}
	return out, err
}

func (p readyPods) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	err := p.PodInterface.Delete(ctx, name, opts)
	if (err == nil || apierrors.IsNotFound(err)) && opts.Preconditions != nil && opts.Preconditions.UID != nil {
		p.count.deleted(*opts.Preconditions.UID)
	}
	return err
}
