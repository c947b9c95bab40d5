package scheduler

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"flotilla.dev/flotilla/api/scheduling"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"pgregory.net/rapid"
)

var (
	taintPool = []corev1.Taint{
		{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoSchedule},
		{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute},
		{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
		{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoExecute},
		{Key: "soft", Value: "x", Effect: corev1.TaintEffectPreferNoSchedule},
	}
	tolerationPool = []corev1.Toleration{
		{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists},
		{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
		{Key: "dedicated", Operator: corev1.TolerationOpExists},
		{Operator: corev1.TolerationOpExists},
	}
	ipPool = []string{"", "0.0.0.0", "10.0.0.1", "10.0.0.2"}
)

func genNode(t *rapid.T, i int) *corev1.Node {
	n := node(fmt.Sprintf("n%d", i),
		fmt.Sprintf("%dm", rapid.IntRange(0, 4000).Draw(t, "cpu")),
		fmt.Sprintf("%dMi", rapid.IntRange(0, 4096).Draw(t, "mem")),
		int64(rapid.IntRange(0, 6).Draw(t, "maxPods")))
	for _, ti := range rapid.SliceOfNDistinct(rapid.IntRange(0, len(taintPool)-1), 0, 2, rapid.ID).Draw(t, "taints") {
		n.Spec.Taints = append(n.Spec.Taints, taintPool[ti])
	}
	n.Spec.Unschedulable = rapid.IntRange(0, 9).Draw(t, "unsched") == 0
	if rapid.IntRange(0, 9).Draw(t, "notready") == 0 {
		notReady(n)
	}
	n.Labels[corev1.LabelTopologyZone] = rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "zone")
	return n
}

func genPod(t *rapid.T, i int) *corev1.Pod {
	p := pod(fmt.Sprintf("p%d", i),
		fmt.Sprintf("%dm", rapid.IntRange(0, 1500).Draw(t, "podcpu")),
		fmt.Sprintf("%dMi", rapid.IntRange(0, 1500).Draw(t, "podmem")))
	p.UID = types.UID(fmt.Sprintf("uid-%d", i))
	for _, ti := range rapid.SliceOfNDistinct(rapid.IntRange(0, len(tolerationPool)-1), 0, 2, rapid.ID).Draw(t, "tolerations") {
		p.Spec.Tolerations = append(p.Spec.Tolerations, tolerationPool[ti])
	}
	if rapid.Bool().Draw(t, "hasPort") {
		proto := rapid.SampledFrom([]corev1.Protocol{"", corev1.ProtocolTCP, corev1.ProtocolUDP}).Draw(t, "proto")
		withHostPort(int32(rapid.IntRange(80, 82).Draw(t, "port")), proto, rapid.SampledFrom(ipPool).Draw(t, "ip"))(p)
	}
	if rapid.IntRange(0, 4).Draw(t, "init") == 0 {
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(fmt.Sprintf("%dm", rapid.IntRange(0, 3000).Draw(t, "initcpu")))}}}}
	}
	if rapid.Bool().Draw(t, "owned") {
		withOwner(rapid.SampledFrom([]string{"rs-a", "rs-b"}).Draw(t, "owner"))(p)
	}
	return p
}

// independent re-statement of the rules, from the objects alone.
func requestOf(p *corev1.Pod) (cpu, mem int64) {
	for _, c := range p.Spec.Containers {
		cpu += c.Resources.Requests.Cpu().MilliValue()
		mem += c.Resources.Requests.Memory().Value()
	}
	for _, c := range p.Spec.InitContainers {
		cpu = max(cpu, c.Resources.Requests.Cpu().MilliValue())
		mem = max(mem, c.Resources.Requests.Memory().Value())
	}
	return cpu, mem
}

func tolerated(p *corev1.Pod, n *corev1.Node) bool {
	_, bad := scheduling.FindUntoleratedTaint(n.Spec.Taints, p.Spec.Tolerations)
	return !bad
}

func normPort(cp corev1.ContainerPort) (corev1.Protocol, string) {
	proto, ip := cp.Protocol, cp.HostIP
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	if ip == "" {
		ip = "0.0.0.0"
	}
	return proto, ip
}

func portClash(a, b *corev1.Pod) bool {
	for _, pa := range a.Spec.Containers[0].Ports {
		for _, pb := range b.Spec.Containers[0].Ports {
			protoA, ipA := normPort(pa)
			protoB, ipB := normPort(pb)
			if pa.HostPort == pb.HostPort && protoA == protoB && (ipA == ipB || ipA == "0.0.0.0" || ipB == "0.0.0.0") {
				return true
			}
		}
	}
	return false
}

// TestPlacementInvariants schedules random pods onto random nodes, with
// random binding failures and deletions, and checks every placement
// against the rules restated independently: never over allocatable (nor
// over max pods), never onto an untolerated NoSchedule/NoExecute taint,
// never two pods on one host port; and a pod refused everywhere really
// fits nowhere.
func TestPlacementInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := map[string]*corev1.Node{}
		c := NewCache(CacheConfig{PercentageOfNodesToScore: rapid.IntRange(0, 100).Draw(t, "pct")})
		c.rng = rand.New(rand.NewPCG(1, 2)) // rapid needs runs it can replay
		for i := range rapid.IntRange(1, 8).Draw(t, "nodes") {
			n := genNode(t, i)
			nodes[n.Name] = n
			c.SetNode(n)
		}
		placed := map[string][]*corev1.Pod{}
		fits := func(p *corev1.Pod, n *corev1.Node) bool {
			cpu, mem := requestOf(p)
			var usedCPU, usedMem int64
			for _, q := range placed[n.Name] {
				qc, qm := requestOf(q)
				usedCPU += qc
				usedMem += qm
				if portClash(p, q) {
					return false
				}
			}
			alloc := n.Status.Allocatable
			// A pod that tolerates everything may go onto a cordoned node,
			// as DaemonSet pods do in Kubernetes.
			cordoned := n.Spec.Unschedulable && !scheduling.Tolerated(&unschedulableTaint, p.Spec.Tolerations)
			return !(cordoned || !nodeReady(n) || !tolerated(p, n) ||
				int64(len(placed[n.Name])+1) > alloc.Pods().Value() ||
				cpu > 0 && usedCPU+cpu > alloc.Cpu().MilliValue() ||
				mem > 0 && usedMem+mem > alloc.Memory().Value())
		}
		for i := range rapid.IntRange(1, 40).Draw(t, "pods") {
			p := genPod(t, i)
			got, err := c.Schedule(p)
			var fe *FitError
			switch {
			case errors.As(err, &fe):
				for _, n := range nodes {
					if fits(p, n) {
						t.Fatalf("pod %s refused (%v) but fits on %s", p.Name, err, n.Name)
					}
				}
				continue
			case err != nil:
				t.Fatalf("Schedule: %v", err)
			}
			if !fits(p, nodes[got]) {
				t.Fatalf("pod %s placed on %s where it does not fit (placed: %d)", p.Name, got, len(placed[got]))
			}
			switch rapid.IntRange(0, 5).Draw(t, "outcome") {
			case 0: // binding failed
				c.Forget(p)
			case 1: // bound, then deleted
				c.SetPod(bound(p.DeepCopy(), got))
				c.DeletePod(p)
			case 2: // bound and confirmed by the informer
				c.SetPod(bound(p.DeepCopy(), got))
				placed[got] = append(placed[got], p)
			default: // still assumed
				placed[got] = append(placed[got], p)
			}
		}
	})
}
