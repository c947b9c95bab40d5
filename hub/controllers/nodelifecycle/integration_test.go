package nodelifecycle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/controllers/nodelifecycle"
	"flotilla.dev/flotilla/hub/hubtest"
)

func loop(cfg nodelifecycle.Config) hub.Loop {
	return hub.Loop{Name: "nodelifecycle", Run: func(ctx context.Context, rc *rest.Config) error {
		client, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return err
		}
		c, err := nodelifecycle.New(client, informers.NewSharedInformerFactory(client, 0), cfg)
		if err != nil {
			return err
		}
		return c.Run(ctx)
	}}
}

// device is a simulated agent: it registers its Node and renews its
// Lease until stopped.
type device struct {
	name string
	stop context.CancelFunc
	done chan struct{}
}

func startDevice(t *testing.T, c kubernetes.Interface, name string) *device {
	t.Helper()
	ctx := context.Background()
	n, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("registering %s: %v", name, err)
	}
	if err == nil {
		// The controller may write the Node (its pod CIDR) in between, as
		// it does to a real agent's: read again and retry, as the agent does.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := c.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
			_, err = c.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("%s status: %v", name, err)
		}
	}
	holder := name
	_, err = c.CoordinationV1().Leases(api.NamespaceNodeLease).Create(ctx, &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: api.NamespaceNodeLease, Name: name},
		Spec:       coordv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("lease of %s: %v", name, err)
	}
	dctx, cancel := context.WithCancel(ctx)
	d := &device{name: name, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-dctx.Done():
				return
			case <-tick.C:
			}
			l, err := c.CoordinationV1().Leases(api.NamespaceNodeLease).Get(dctx, name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			_, _ = c.CoordinationV1().Leases(api.NamespaceNodeLease).Update(dctx, l, metav1.UpdateOptions{})
		}
	}()
	t.Cleanup(d.halt)
	return d
}

func (d *device) halt() {
	d.stop()
	<-d.done
}

func createPod(t *testing.T, c kubernetes.Interface, name, node string, mod func(*corev1.Pod)) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "app", Image: "registry.local/app@sha256:" + fmt.Sprintf("%064d", 0)}}},
	}
	if mod != nil {
		mod(p)
	}
	p, err := c.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if _, err := c.CoreV1().Pods("default").UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("pod %s status: %v", name, err)
	}
}

func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// gone reports whether a pod was evicted: deleted, or terminating (the
// agent that would confirm the deletion is unreachable).
func gone(ctx context.Context, c kubernetes.Interface, name string) (bool, error) {
	p, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return p.DeletionTimestamp != nil, nil
}

func TestAgainstHub(t *testing.T) {
	cfg := nodelifecycle.Config{GracePeriod: 2 * time.Second, MonitorPeriod: 100 * time.Millisecond}
	h := hubtest.Start(t, hubtest.Options{Loops: []hub.Loop{loop(cfg)}})
	c := h.Client
	quiet := startDevice(t, c, "quiet")
	for _, n := range []string{"a", "b", "c"} {
		startDevice(t, c, n)
	}
	one := int64(1)
	createPod(t, c, "short-toleration", "quiet", func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &one}}
	})
	createPod(t, c, "default-toleration", "quiet", nil)
	// Mirror pods are the device's own to make.
	createPod(t, h.NodeClient("quiet"), "static", "quiet", func(p *corev1.Pod) {
		p.Annotations = map[string]string{api.AnnotationMirrorPod: "hash"}
	})

	waitFor(t, "pod CIDRs assigned", func(ctx context.Context) (bool, error) {
		nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		seen := map[string]bool{}
		for _, n := range nodes.Items {
			if n.Spec.PodCIDR == "" {
				return false, nil
			}
			if seen[n.Spec.PodCIDR] {
				return false, fmt.Errorf("%s given twice", n.Spec.PodCIDR)
			}
			seen[n.Spec.PodCIDR] = true
		}
		return len(seen) == 4, nil
	})

	quiet.halt()
	waitFor(t, "quiet node Unknown and tainted", func(ctx context.Context) (bool, error) {
		n, err := c.CoreV1().Nodes().Get(ctx, "quiet", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		taints := 0
		for _, tt := range n.Spec.Taints {
			if tt.Key == corev1.TaintNodeUnreachable {
				taints++
			}
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionUnknown && cond.Reason == "NodeStatusUnknown" && taints == 2, nil
			}
		}
		return false, nil
	})
	waitFor(t, "pod with a 1 s toleration evicted", func(ctx context.Context) (bool, error) {
		return gone(ctx, c, "short-toleration")
	})
	for _, name := range []string{"default-toleration", "static"} {
		p, err := c.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.DeletionTimestamp != nil {
			t.Errorf("pod %s evicted", name)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status != corev1.ConditionFalse {
				t.Errorf("pod %s on an Unknown node is Ready=%s", name, cond.Status)
			}
		}
	}

	// A restarted hub rebuilds the taken CIDRs from the Nodes: a new node
	// gets one nobody holds. (The start-up grace period is covered by
	// TestRestartWaitsAFullGracePeriod on a fake clock.)
	before, err := c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h = h.Restart()
	c = h.Client
	startDevice(t, c, "late")
	waitFor(t, "late node gets a fresh CIDR after the restart", func(ctx context.Context) (bool, error) {
		n, err := c.CoreV1().Nodes().Get(ctx, "late", metav1.GetOptions{})
		if err != nil || n.Spec.PodCIDR == "" {
			return false, err
		}
		for _, o := range before.Items {
			if o.Spec.PodCIDR == n.Spec.PodCIDR {
				return false, fmt.Errorf("%s handed to late, already held by %s", n.Spec.PodCIDR, o.Name)
			}
		}
		return true, nil
	})
}
