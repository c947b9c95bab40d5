package scheduler

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

const unreachable = "node.kubernetes.io/unreachable"

// fitMessage schedules p on c and returns the FitError message.
func fitMessage(t *testing.T, c *Cache, p *corev1.Pod) string {
	t.Helper()
	node, err := c.Schedule(p)
	var fe *FitError
	if !errors.As(err, &fe) {
		t.Fatalf("Schedule = %q, %v; want a FitError", node, err)
	}
	return err.Error()
}

func TestFitErrorMessages(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []*corev1.Node
		bound []*corev1.Pod
		pod   *corev1.Pod
		want  string
	}{{
		name: "memory and unreachable taint, sorted as kube-scheduler sorts",
		nodes: []*corev1.Node{
			node("n1", "4", "1Gi", 110), node("n2", "4", "1Gi", 110), node("n3", "4", "1Gi", 110),
			node("n4", "4", "8Gi", 110, withTaint(unreachable, "", corev1.TaintEffectNoSchedule), notReady),
			node("n5", "4", "8Gi", 110, withTaint(unreachable, "", corev1.TaintEffectNoExecute), notReady),
		},
		pod:  pod("p", "1", "2Gi"),
		want: "0/5 nodes are available: 2 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, 3 Insufficient memory.",
	}, {
		name:  "cpu",
		nodes: []*corev1.Node{node("n1", "1", "1Gi", 110), node("n2", "500m", "1Gi", 110)},
		pod:   pod("p", "2", ""),
		want:  "0/2 nodes are available: 2 Insufficient cpu.",
	}, {
		name:  "cpu and memory on one node count for both",
		nodes: []*corev1.Node{node("n1", "1", "1Gi", 110)},
		pod:   pod("p", "2", "2Gi"),
		want:  "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory.",
	}, {
		name:  "ephemeral storage",
		nodes: []*corev1.Node{node("n1", "1", "1Gi", 110)},
		pod: pod("p", "", "", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceEphemeralStorage] = resource.MustParse("20Gi")
		}),
		want: "0/1 nodes are available: 1 Insufficient ephemeral-storage.",
	}, {
		name:  "requests already bound count",
		nodes: []*corev1.Node{node("n1", "2", "4Gi", 110)},
		bound: []*corev1.Pod{bound(pod("b", "1500m", "1Gi"), "n1")},
		pod:   pod("p", "1", "1Gi"),
		want:  "0/1 nodes are available: 1 Insufficient cpu.",
	}, {
		name:  "too many pods",
		nodes: []*corev1.Node{node("n1", "2", "4Gi", 1), node("n2", "2", "4Gi", 0)},
		bound: []*corev1.Pod{bound(pod("b", "", ""), "n1")},
		pod:   pod("p", "", ""),
		want:  "0/2 nodes are available: 2 Too many pods.",
	}, {
		name:  "unschedulable",
		nodes: []*corev1.Node{node("n1", "2", "4Gi", 110, unschedulable), node("n2", "1", "1Gi", 110)},
		pod:   pod("p", "2", "2Gi"),
		want:  "0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 1 node(s) were unschedulable.",
	}, {
		name: "taint with a value",
		nodes: []*corev1.Node{
			node("n1", "2", "4Gi", 110, withTaint("dedicated", "gpu", corev1.TaintEffectNoSchedule)),
			node("n2", "2", "4Gi", 110, withTaint("dedicated", "gpu", corev1.TaintEffectPreferNoSchedule), unschedulable),
		},
		pod:  pod("p", "", ""),
		want: "0/2 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) were unschedulable.",
	}, {
		name:  "not ready",
		nodes: []*corev1.Node{node("n1", "2", "4Gi", 110, notReady)},
		pod:   pod("p", "", ""),
		want:  "0/1 nodes are available: 1 node(s) were not ready.",
	}, {
		name:  "node selector",
		nodes: []*corev1.Node{node("n1", "2", "4Gi", 110, withLabel("site", "berlin")), node("n2", "2", "4Gi", 110)},
		pod:   pod("p", "", "", withNodeSelector("site", "paris")),
		want:  "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.",
	}, {
		name:  "node affinity",
		nodes: []*corev1.Node{node("n1", "2", "4Gi", 110, withLabel("site", "berlin")), node("n2", "1", "1Gi", 110, withLabel("site", "paris"))},
		pod: pod("p", "2", "", withAffinity(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "site", Operator: corev1.NodeSelectorOpIn, Values: []string{"paris"}}}})),
		want: "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector.",
	}, {
		name:  "host ports",
		nodes: []*corev1.Node{node("n1", "2", "4Gi", 110), node("n2", "2", "4Gi", 110)},
		bound: []*corev1.Pod{
			bound(pod("b1", "", "", withHostPort(8080, "", "")), "n1"),
			bound(pod("b2", "", "", withHostPort(8080, corev1.ProtocolTCP, "10.0.0.1")), "n2"),
		},
		pod:  pod("p", "", "", withHostPort(8080, corev1.ProtocolTCP, "")),
		want: "0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports.",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCache(tc.nodes...)
			for _, b := range tc.bound {
				c.SetPod(b)
			}
			if got := fitMessage(t, c, tc.pod); got != tc.want {
				t.Errorf("message\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestNoNodes(t *testing.T) {
	_, err := NewCache(CacheConfig{}).Schedule(pod("p", "", ""))
	if !errors.Is(err, ErrNoNodesAvailable) || err.Error() != "no nodes available to schedule pods" {
		t.Fatalf("Schedule on no nodes = %v", err)
	}
}

func TestFits(t *testing.T) {
	exists := corev1.TolerationOpExists
	for _, tc := range []struct {
		name string
		node *corev1.Node
		pod  *corev1.Pod
	}{
		{"tolerated NoExecute taint", node("n", "1", "1Gi", 10, withTaint("k", "v", corev1.TaintEffectNoExecute)),
			pod("p", "", "", withToleration(corev1.Toleration{Key: "k", Value: "v", Effect: corev1.TaintEffectNoExecute}))},
		{"Exists with empty key tolerates everything", node("n", "1", "1Gi", 10, withTaint("a", "b", corev1.TaintEffectNoSchedule)),
			pod("p", "", "", withToleration(corev1.Toleration{Operator: exists}))},
		{"empty effect tolerates every effect", node("n", "1", "1Gi", 10, withTaint("a", "b", corev1.TaintEffectNoSchedule)),
			pod("p", "", "", withToleration(corev1.Toleration{Key: "a", Operator: exists}))},
		{"PreferNoSchedule does not filter", node("n", "1", "1Gi", 10, withTaint("a", "b", corev1.TaintEffectPreferNoSchedule)), pod("p", "", "")},
		{"unschedulable tolerated", node("n", "1", "1Gi", 10, unschedulable),
			pod("p", "", "", withToleration(corev1.Toleration{Key: corev1.TaintNodeUnschedulable, Operator: exists, Effect: corev1.TaintEffectNoSchedule}))},
		{"exact fit", node("n", "1", "1Gi", 1), pod("p", "1", "1Gi")},
		{"other protocol on the same host port", node("n", "1", "1Gi", 10), pod("p", "", "", withHostPort(53, corev1.ProtocolUDP, ""))},
		{"NotIn matches a missing label", node("n", "1", "1Gi", 10), pod("p", "", "", withAffinity(corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "site", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"x"}}}}))},
		{"DoesNotExist", node("n", "1", "1Gi", 10), pod("p", "", "", withAffinity(corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gpu", Operator: corev1.NodeSelectorOpDoesNotExist}}}))},
		{"Exists", node("n", "1", "1Gi", 10, withLabel("gpu", "")), pod("p", "", "", withAffinity(corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gpu", Operator: corev1.NodeSelectorOpExists}}}))},
		{"Gt and Lt", node("n", "1", "1Gi", 10, withLabel("cores", "8")), pod("p", "", "", withAffinity(corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: "cores", Operator: corev1.NodeSelectorOpGt, Values: []string{"4"}},
				{Key: "cores", Operator: corev1.NodeSelectorOpLt, Values: []string{"16"}}}}))},
		{"terms are ORed", node("n", "1", "1Gi", 10, withLabel("site", "b")), pod("p", "", "", withAffinity(
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "site", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "site", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}}))},
		{"matchFields metadata.name", node("n", "1", "1Gi", 10), pod("p", "", "", withAffinity(corev1.NodeSelectorTerm{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n"}}}}))},
		{"zero request on a full node", node("n", "1", "1Gi", 10), pod("p", "", "", func(p *corev1.Pod) {})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCache(tc.node)
			if tc.name == "other protocol on the same host port" {
				c.SetPod(bound(pod("b", "", "", withHostPort(53, corev1.ProtocolTCP, "")), "n"))
			}
			if tc.name == "zero request on a full node" {
				c.SetPod(bound(pod("b", "1", "1Gi"), "n"))
			}
			got, err := c.Schedule(tc.pod)
			if err != nil || got != "n" {
				t.Fatalf("Schedule = %q, %v; want n", got, err)
			}
		})
	}
}

func TestDoesNotFit(t *testing.T) {
	for _, tc := range []struct {
		name string
		node *corev1.Node
		pod  *corev1.Pod
		want string
	}{
		{"Gt is strict", node("n", "1", "1Gi", 10, withLabel("cores", "4")), pod("p", "", "", withAffinity(corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "cores", Operator: corev1.NodeSelectorOpGt, Values: []string{"4"}}}})), ReasonNodeAffinity},
		{"Gt with a non-number never matches", node("n", "1", "1Gi", 10, withLabel("cores", "4")), pod("p", "", "", withAffinity(corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "cores", Operator: corev1.NodeSelectorOpGt, Values: []string{"many"}}}})), ReasonNodeAffinity},
		{"an empty term matches nothing", node("n", "1", "1Gi", 10), pod("p", "", "", withAffinity(corev1.NodeSelectorTerm{})), ReasonNodeAffinity},
		{"matchFields on another name", node("n", "1", "1Gi", 10), pod("p", "", "", withAffinity(corev1.NodeSelectorTerm{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"other"}}}})), ReasonNodeAffinity},
		{"toleration for another effect", node("n", "1", "1Gi", 10, withTaint("k", "v", corev1.TaintEffectNoExecute)),
			pod("p", "", "", withToleration(corev1.Toleration{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule})), "node(s) had untolerated taint {k: v}"},
		{"toleration with another value", node("n", "1", "1Gi", 10, withTaint("k", "v", corev1.TaintEffectNoSchedule)),
			pod("p", "", "", withToleration(corev1.Toleration{Key: "k", Value: "w"})), "node(s) had untolerated taint {k: v}"},
		{"init container max rule", node("n", "2", "1Gi", 10), pod("p", "1", "", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}
		}), "Insufficient cpu"},
		{"sidecar adds to app containers", node("n", "2", "1Gi", 10), pod("p", "1500m", "", func(p *corev1.Pod) {
			always := corev1.ContainerRestartPolicyAlways
			p.Spec.InitContainers = []corev1.Container{{Name: "side", RestartPolicy: &always, Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}
		}), "Insufficient cpu"},
		{"limit without request counts", node("n", "2", "1Gi", 10), pod("p", "", "", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}
		}), "Insufficient memory"},
		{"specific host IP against wildcard", node("n", "1", "1Gi", 10), pod("p", "", "", withHostPort(80, "", "127.0.0.1")), ReasonHostPorts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCache(tc.node)
			if tc.name == "specific host IP against wildcard" {
				c.SetPod(bound(pod("b", "", "", withHostPort(80, "", "")), "n"))
			}
			want := "0/1 nodes are available: 1 " + tc.want + "."
			if got := fitMessage(t, c, tc.pod); got != want {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
}

func TestInitContainerFitsWhenSequential(t *testing.T) {
	// Init containers run one after another before the app: 1.5 + 1.5
	// never run together, so a 2-cpu node fits.
	c := newTestCache(node("n", "2", "1Gi", 10))
	p := pod("p", "1", "", func(p *corev1.Pod) {
		for _, name := range []string{"a", "b"} {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: name, Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m")}}})
		}
	})
	if got, err := c.Schedule(p); err != nil || got != "n" {
		t.Fatalf("Schedule = %q, %v", got, err)
	}
}

func TestAssumeIsSeenByNextPod(t *testing.T) {
	c := newTestCache(node("n1", "1", "1Gi", 10))
	if _, err := c.Schedule(pod("a", "1", "")); err != nil {
		t.Fatal(err)
	}
	b := pod("b", "1", "")
	if got := fitMessage(t, c, b); got != "0/1 nodes are available: 1 Insufficient cpu." {
		t.Fatalf("second pod: %q", got)
	}
	// Binding a failed: forgetting it frees the cpu for b.
	a := pod("a", "1", "")
	a.UID = "" // different UID: Forget of an unknown pod must not free a's cpu
	c.Forget(a)
	if _, err := c.Schedule(b); err == nil {
		t.Fatal("forgetting an unknown pod freed resources")
	}
}

func TestForgetAndConfirm(t *testing.T) {
	c := newTestCache(node("n1", "1", "1Gi", 10))
	a := pod("a", "1", "")
	if _, err := c.Schedule(a); err != nil {
		t.Fatal(err)
	}
	if !c.IsAssumed(a) {
		t.Fatal("placement not assumed")
	}
	if _, err := c.Schedule(a); !errors.Is(err, ErrAlreadyAssumed) {
		t.Fatalf("scheduling an assumed pod again: %v", err)
	}
	c.Forget(a)
	if c.IsAssumed(a) {
		t.Fatal("Forget kept the placement")
	}
	if _, err := c.Schedule(pod("b", "1", "")); err != nil {
		t.Fatalf("cpu not freed by Forget: %v", err)
	}
	// A confirmed placement survives Forget.
	c2 := newTestCache(node("n1", "1", "1Gi", 10))
	x := pod("x", "1", "")
	if _, err := c2.Schedule(x); err != nil {
		t.Fatal(err)
	}
	c2.SetPod(bound(x.DeepCopy(), "n1"))
	c2.Forget(x)
	if _, err := c2.Schedule(pod("y", "1", "")); err == nil {
		t.Fatal("Forget dropped a confirmed placement")
	}
	// A terminated pod frees its resources.
	done := bound(x.DeepCopy(), "n1")
	done.Status.Phase = corev1.PodSucceeded
	c2.SetPod(done)
	if _, err := c2.Schedule(pod("z", "1", "")); err != nil {
		t.Fatalf("terminated pod still holds cpu: %v", err)
	}
}

func TestSpreadsWorkloadAcrossNodesAndZones(t *testing.T) {
	var nodes []*corev1.Node
	for _, n := range []struct{ name, zone string }{{"a1", "a"}, {"a2", "a"}, {"a3", "a"}, {"b1", "b"}} {
		nodes = append(nodes, node(n.name, "64", "256Gi", 110, withLabel(corev1.LabelTopologyZone, n.zone)))
	}
	c := newTestCache(nodes...)
	perZone := map[string]int{}
	perNode := map[string]int{}
	for i := range 8 {
		got, err := c.Schedule(pod("w", "100m", "100Mi", withOwner("rs-1"), func(p *corev1.Pod) { p.Name = p.Name + string(rune('a'+i)) }))
		if err != nil {
			t.Fatal(err)
		}
		perNode[got]++
		perZone[got[:1]]++
	}
	if perZone["a"] != 4 || perZone["b"] != 4 {
		t.Errorf("zones got %v, want 4 and 4", perZone)
	}
	if perNode["b1"] != 4 {
		t.Errorf("nodes got %v", perNode)
	}
}

func TestSpreadsAcrossNodes(t *testing.T) {
	c := newTestCache(node("n1", "64", "256Gi", 110), node("n2", "64", "256Gi", 110), node("n3", "64", "256Gi", 110))
	counts := map[string]int{}
	for i := range 9 {
		got, err := c.Schedule(pod("w", "", "", withOwner("rs-2"), func(p *corev1.Pod) { p.Name += string(rune('a' + i)) }))
		if err != nil {
			t.Fatal(err)
		}
		counts[got]++
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if counts[n] != 3 {
			t.Errorf("spread %v, want 3 per node", counts)
		}
	}
}

func TestPinnedPodLooksOnlyAtItsNode(t *testing.T) {
	var nodes []*corev1.Node
	for _, n := range []string{"x", "y", "z"} {
		nodes = append(nodes, node(n, "1", "1Gi", 10))
	}
	c := newTestCache(nodes...)
	p := pod("ds", "", "", withAffinity(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
		{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"y"}}}}))
	if got, err := c.Schedule(p); err != nil || got != "y" {
		t.Fatalf("Schedule = %q, %v; want y", got, err)
	}
}

func TestNumFeasibleNodesToFind(t *testing.T) {
	c := NewCache(CacheConfig{})
	for _, tc := range []struct{ all, want int }{{50, 50}, {100, 100}, {1000, 420}, {5000, 500}, {100000, 5000}} {
		if got := c.numFeasibleNodesToFind(tc.all); got != tc.want {
			t.Errorf("numFeasibleNodesToFind(%d) = %d, want %d", tc.all, got, tc.want)
		}
	}
}

func TestDeleteNodeKeepsBoundPods(t *testing.T) {
	c := newTestCache(node("n1", "1", "1Gi", 10))
	p := bound(pod("a", "1", ""), "n1")
	c.SetPod(p)
	c.DeleteNode("n1")
	if c.NodeCount() != 0 {
		t.Fatal("node still schedulable after delete")
	}
	c.SetNode(node("n1", "1", "1Gi", 10))
	if _, err := c.Schedule(pod("b", "1", "")); err == nil {
		t.Fatal("re-added node forgot its bound pod")
	}
	c.DeletePod(p)
	if _, err := c.Schedule(pod("c", "1", "")); err != nil {
		t.Fatalf("deleted pod still holds cpu: %v", err)
	}
}
