package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"flotilla.dev/flotilla/agent/hubclient/fromclientset"
	"flotilla.dev/flotilla/api"
)

// fakeMachine is a machine whose figures the test sets.
type fakeMachine struct {
	mu    sync.Mutex
	stats Stats
}

func (m *fakeMachine) Stats(string) (Stats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats, nil
}

func (m *fakeMachine) Info() (SystemInfo, error) {
	return SystemInfo{KernelVersion: "6.1.0-test", OSImage: "Test OS 1", Architecture: "arm64", OperatingSystem: "linux", Hostname: "dev-host"}, nil
}

func (m *fakeMachine) set(f func(*Stats)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(&m.stats)
}

func newFakeMachine() *fakeMachine {
	return &fakeMachine{stats: Stats{CPUs: 4, MemoryTotal: 4 * gi, MemoryAvailable: 3 * gi, DiskTotal: 32 * gi, DiskAvailable: 20 * gi, Procs: 200, PIDMax: 32768}}
}

func quietLog() *slog.Logger {
	if os.Getenv("FLOTILLA_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func testConfig(c kubernetes.Interface, m Machine) Config {
	return Config{
		Client: fromclientset.New(c), Name: "dev1", Labels: map[string]string{"site": "berlin"}, NodeIP: "192.0.2.10",
		DataDir: "/unused", AgentVersion: "v9.9.9", RuntimeVersion: "containerd://1.6.20", Machine: m,
		StatusInterval: 10 * time.Millisecond, LeaseInterval: 10 * time.Millisecond, HeartbeatInterval: time.Hour,
		Log: quietLog(),
	}
}

func start(t *testing.T, cfg Config) (*Node, context.CancelFunc) {
	t.Helper()
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return n, cancel
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func getNode(t *testing.T, c kubernetes.Interface) *corev1.Node {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), "dev1", metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return n
}

// newClientset is a fake hub that gives created objects a UID, as the hub
// does.
func newClientset(objs ...runtime.Object) *fake.Clientset {
	c := fake.NewClientset(objs...)
	c.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if o, ok := a.(k8stesting.CreateAction).GetObject().(metav1.Object); ok && o.GetUID() == "" {
			o.SetUID(types.UID(fmt.Sprintf("uid-%d", uidSeq.Add(1))))
		}
		return false, nil, nil
	})
	return c
}

var uidSeq atomic.Int64

func TestRegistersAndReports(t *testing.T) {
	c := newClientset()
	m := newFakeMachine()
	start(t, testConfig(c, m))
	var node *corev1.Node
	eventually(t, "the node with a Ready condition", func() bool {
		node = getNode(t, c)
		return node != nil && condOf(node.Status.Conditions, corev1.NodeReady) != nil
	})
	if node.Labels["site"] != "berlin" || node.Labels[api.LabelHostname] != "dev1" || node.Labels[api.LabelOS] == "" || node.Labels[api.LabelArch] == "" {
		t.Errorf("labels = %v", node.Labels)
	}
	if cpu := node.Status.Capacity[corev1.ResourceCPU]; cpu.Value() != 4 {
		t.Errorf("cpu capacity = %s", cpu.String())
	}
	if pods := node.Status.Allocatable[corev1.ResourcePods]; pods.Value() != 110 {
		t.Errorf("pods allocatable = %s", pods.String())
	}
	ni := node.Status.NodeInfo
	if ni.KubeletVersion != "v9.9.9" || ni.ContainerRuntimeVersion != "containerd://1.6.20" || ni.OSImage != "Test OS 1" || ni.Architecture != "arm64" || ni.KernelVersion != "6.1.0-test" {
		t.Errorf("nodeInfo = %+v", ni)
	}
	wantAddr := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.10"}, {Type: corev1.NodeHostName, Address: "dev-host"}}
	if addressesDiffer(node.Status.Addresses, wantAddr) {
		t.Errorf("addresses = %v", node.Status.Addresses)
	}
	if node.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
		t.Errorf("kubelet port = %d", node.Status.DaemonEndpoints.KubeletEndpoint.Port)
	}

	// Memory pressure shows up in the status.
	m.set(func(s *Stats) { s.MemoryAvailable = 10 * mi })
	eventually(t, "MemoryPressure=True", func() bool {
		n := getNode(t, c)
		c := condOf(n.Status.Conditions, corev1.NodeMemoryPressure)
		return c != nil && c.Status == corev1.ConditionTrue
	})

	// The lease exists and is renewed.
	var first time.Time
	eventually(t, "the lease", func() bool {
		l, err := c.CoordinationV1().Leases(api.NamespaceNodeLease).Get(context.Background(), "dev1", metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return false
		}
		if *l.Spec.HolderIdentity != "dev1" || *l.Spec.LeaseDurationSeconds != 40 {
			t.Fatalf("lease spec = %+v", l.Spec)
		}
		first = l.Spec.RenewTime.Time
		return true
	})
	eventually(t, "a lease renewal with an owner reference to the node", func() bool {
		l, err := c.CoordinationV1().Leases(api.NamespaceNodeLease).Get(context.Background(), "dev1", metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime.After(first) && len(l.OwnerReferences) == 1 && l.OwnerReferences[0].Name == "dev1"
	})
}

func TestAdoptsExistingNodeKeepingOthersLabelsAndTaints(t *testing.T) {
	existing := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "dev1", Labels: map[string]string{"admin": "yes", "site": "old", "dropped": "v"},
			Annotations: map[string]string{AnnotationAgentKeys: "dropped,site"}},
		Spec: corev1.NodeSpec{PodCIDR: "10.42.7.0/24", Taints: []corev1.Taint{{Key: "maint", Effect: corev1.TaintEffectNoSchedule}}},
	}
	c := newClientset(existing)
	n, _ := start(t, testConfig(c, newFakeMachine()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cidr, err := n.WaitForPodCIDR(ctx)
	if err != nil || cidr != "10.42.7.0/24" {
		t.Fatalf("WaitForPodCIDR = %q, %v", cidr, err)
	}
	var node *corev1.Node
	eventually(t, "the adopted node's status", func() bool {
		node = getNode(t, c)
		return condOf(node.Status.Conditions, corev1.NodeReady) != nil
	})
	if node.Labels["admin"] != "yes" || node.Labels["site"] != "berlin" {
		t.Errorf("labels = %v", node.Labels)
	}
	if _, ok := node.Labels["dropped"]; ok {
		t.Error("a label the agent set before and no longer configures is still there")
	}
	if len(node.Spec.Taints) != 1 || node.Spec.Taints[0].Key != "maint" {
		t.Errorf("taints = %v", node.Spec.Taints)
	}
}

func TestWaitForPodCIDRAssignedLater(t *testing.T) {
	c := newClientset()
	n, _ := start(t, testConfig(c, newFakeMachine()))
	eventually(t, "registration", func() bool { return getNode(t, c) != nil })
	got := make(chan string, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cidr, _ := n.WaitForPodCIDR(ctx)
		got <- cidr
	}()
	node := getNode(t, c)
	node.Spec.PodCIDR = "10.42.3.0/24"
	if _, err := c.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if cidr := <-got; cidr != "10.42.3.0/24" {
		t.Errorf("WaitForPodCIDR = %q", cidr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := (&Node{cidrCh: make(chan struct{})}).WaitForPodCIDR(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitForPodCIDR on a canceled context = %v", err)
	}
}

func TestCorrectsStatusWrittenByOthersAndReregisters(t *testing.T) {
	c := newClientset()
	start(t, testConfig(c, newFakeMachine()))
	eventually(t, "Ready", func() bool {
		n := getNode(t, c)
		return n != nil && condOf(n.Status.Conditions, corev1.NodeReady) != nil
	})
	// The hub marks the node Unknown; the agent must post Ready again.
	node := getNode(t, c)
	condOf(node.Status.Conditions, corev1.NodeReady).Status = corev1.ConditionUnknown
	if _, err := c.CoreV1().Nodes().UpdateStatus(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Ready=True again", func() bool {
		return condOf(getNode(t, c).Status.Conditions, corev1.NodeReady).Status == corev1.ConditionTrue
	})
	// Deleted on the hub: registered again.
	if err := c.CoreV1().Nodes().Delete(context.Background(), "dev1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "re-registration", func() bool {
		n := getNode(t, c)
		return n != nil && n.Labels["site"] == "berlin"
	})
}

func TestReadyHook(t *testing.T) {
	c := newClientset()
	cfg := testConfig(c, newFakeMachine())
	var mu sync.Mutex
	readyErr := errors.New("waiting for the pod CIDR")
	cfg.Ready = func(context.Context) error { mu.Lock(); defer mu.Unlock(); return readyErr }
	start(t, cfg)
	eventually(t, "Ready=False with the hook's reason", func() bool {
		n := getNode(t, c)
		if n == nil {
			return false
		}
		r := condOf(n.Status.Conditions, corev1.NodeReady)
		return r != nil && r.Status == corev1.ConditionFalse && r.Message == "waiting for the pod CIDR"
	})
	mu.Lock()
	readyErr = nil
	mu.Unlock()
	eventually(t, "Ready=True", func() bool {
		return condOf(getNode(t, c).Status.Conditions, corev1.NodeReady).Status == corev1.ConditionTrue
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	c := newClientset()
	for name, mod := range map[string]func(*Config){
		"no client":    func(c *Config) { c.Client = nil },
		"bad name":     func(c *Config) { c.Name = "Dev_1" },
		"no data dir":  func(c *Config) { c.DataDir = "" },
		"bad ip":       func(c *Config) { c.NodeIP = "10.0.0" },
		"bad label":    func(c *Config) { c.Labels = map[string]string{"a b": "c"} },
		"fixed label":  func(c *Config) { c.Labels = map[string]string{api.LabelOS: "windows"} },
		"bad max pods": func(c *Config) { c.MaxPods = -1 },
	} {
		cfg := testConfig(c, newFakeMachine())
		mod(&cfg)
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: New = %v, want ErrConfig", name, err)
		}
	}
}
