package nodelifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"flotilla.dev/flotilla/api"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
)

// runController runs a Controller over client until the test ends or
// stop is called.
func runController(t *testing.T, client *fake.Clientset, cfg Config) (stop func()) {
	t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = testingclock.NewFakeClock(t0)
	}
	cfg.Recorder = record.NewFakeRecorder(1000)
	c, err := New(client, informers.NewSharedInformerFactory(client, 0), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func podCIDRs(t *testing.T, client *fake.Clientset, want int) map[string]string {
	t.Helper()
	var out map[string]string
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		out = map[string]string{}
		for _, n := range nodes.Items {
			if n.Spec.PodCIDR == "" {
				return false, nil
			}
			if len(n.Spec.PodCIDRs) != 1 || n.Spec.PodCIDRs[0] != n.Spec.PodCIDR {
				return false, fmt.Errorf("node %s: podCIDRs %v disagree with podCIDR %s", n.Name, n.Spec.PodCIDRs, n.Spec.PodCIDR)
			}
			out[n.Name] = n.Spec.PodCIDR
		}
		return len(out) == want, nil
	})
	if err != nil {
		t.Fatalf("pod CIDRs never assigned to %d nodes (have %v): %v", want, out, err)
	}
	return out
}

func bareNode(name, cidr string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if cidr != "" {
		n.Spec.PodCIDR = cidr
		n.Spec.PodCIDRs = []string{cidr}
	}
	return n
}

func assertDistinct(t *testing.T, cidrs map[string]string) {
	t.Helper()
	seen := map[string]string{}
	for node, c := range cidrs {
		if other, ok := seen[c]; ok {
			t.Fatalf("%s given to both %s and %s", c, other, node)
		}
		seen[c] = node
	}
}

func TestPodCIDRsAcrossRestarts(t *testing.T) {
	client := fake.NewSimpleClientset(bareNode("old", "10.42.0.0/24"), bareNode("n1", ""), bareNode("n2", ""))
	stop := runController(t, client, Config{})
	cidrs := podCIDRs(t, client, 3)
	assertDistinct(t, cidrs)
	if cidrs["old"] != "10.42.0.0/24" {
		t.Fatalf("existing CIDR changed to %s", cidrs["old"])
	}
	stop()

	// A new hub process rebuilds the taken set from the Nodes.
	for i := range 3 {
		if _, err := client.CoreV1().Nodes().Create(context.Background(), bareNode(fmt.Sprintf("late%d", i), ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	runController(t, client, Config{})
	after := podCIDRs(t, client, 6)
	assertDistinct(t, after)
	for n, c := range cidrs {
		if after[n] != c {
			t.Errorf("node %s CIDR changed across restart: %s -> %s", n, c, after[n])
		}
	}
}

func TestPodCIDRsCustomRangeAndExhaustion(t *testing.T) {
	var objs []runtime.Object
	for i := range 5 {
		objs = append(objs, bareNode(fmt.Sprintf("n%d", i), ""))
	}
	client := fake.NewSimpleClientset(objs...)
	// A /22 cut into /24s holds four nodes.
	runController(t, client, Config{ClusterCIDR: "10.99.0.0/22", NodeCIDRMaskSize: 24})
	var got map[string]string
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		nodes, _ := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		got = map[string]string{}
		for _, n := range nodes.Items {
			if n.Spec.PodCIDR != "" {
				got[n.Name] = n.Spec.PodCIDR
			}
		}
		return len(got) == 4, nil
	})
	if err != nil {
		t.Fatalf("four of five nodes should get a CIDR, got %v", got)
	}
	assertDistinct(t, got)
	var waiting string
	for i := range 5 {
		if _, ok := got[fmt.Sprintf("n%d", i)]; !ok {
			waiting = fmt.Sprintf("n%d", i)
		}
	}
	// Deleting a node frees its subnet for the one waiting.
	var victim string
	for n := range got {
		victim = n
		break
	}
	if err := client.CoreV1().Nodes().Delete(context.Background(), victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, waiting, metav1.GetOptions{})
		return err == nil && n.Spec.PodCIDR == got[victim], nil
	})
	if err != nil {
		t.Fatalf("waiting node %s never got the freed %s", waiting, got[victim])
	}
}

func TestRunMonitorsOnItsTicker(t *testing.T) {
	fc := testingclock.NewFakeClock(t0)
	client := fake.NewSimpleClientset(readyNode("quiet"), lease("quiet", t0))
	runController(t, client, Config{Clock: fc})
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		fc.Step(5 * time.Second)
		n, err := client.CoreV1().Nodes().Get(ctx, "quiet", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return readyCondition(n).Status == corev1.ConditionUnknown, nil
	})
	if err != nil {
		t.Fatal("quiet node never marked Unknown by the running loop")
	}
}

// TestFullPoolIsOnTheNode: a device that gets no pod CIDR shows why in a
// NetworkUnavailable condition, which clears when it gets one; every Node
// with a pod CIDR carries the fleet's ranges for its agent.
func TestFullPoolIsOnTheNode(t *testing.T) {
	client := fake.NewSimpleClientset(bareNode("a", ""), bareNode("b", ""))
	runController(t, client, Config{ClusterCIDR: "10.99.0.0/24", NodeCIDRMaskSize: 24})
	var full, held string
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, name := range []string{"a", "b"} {
			n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if n.Spec.PodCIDR != "" {
				held = name
				if n.Annotations[api.AnnotationClusterCIDRs] != "10.99.0.0/24" {
					return false, nil
				}
				continue
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeNetworkUnavailable && c.Status == corev1.ConditionTrue && c.Reason == "CIDRNotAvailable" &&
					strings.Contains(c.Message, "10.99.0.0/24") {
					full = name
				}
			}
		}
		return full != "" && held != "", nil
	})
	if err != nil {
		t.Fatalf("one node should hold the only /24 with the ranges annotated (%q), the other say NetworkUnavailable (%q)", held, full)
	}
	if err := client.CoreV1().Nodes().Delete(context.Background(), held, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, full, metav1.GetOptions{})
		if err != nil || n.Spec.PodCIDR == "" {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeNetworkUnavailable {
				return c.Status == corev1.ConditionFalse, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("node %s got the freed /24 but its NetworkUnavailable condition was not cleared", full)
	}
}

// TestOlderNodesLearnTheRanges: a Node given its pod CIDR before the hub
// announced the ranges gets the annotation, and keeps its CIDR.
func TestOlderNodesLearnTheRanges(t *testing.T) {
	client := fake.NewSimpleClientset(bareNode("old", "10.42.7.0/24"))
	runController(t, client, Config{})
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, "old", metav1.GetOptions{})
		return err == nil && n.Annotations[api.AnnotationClusterCIDRs] == api.ClusterCIDRs && n.Spec.PodCIDR == "10.42.7.0/24", err
	})
	if err != nil {
		t.Fatalf("the older Node was not told the ranges, or lost its CIDR: %v", err)
	}
}
