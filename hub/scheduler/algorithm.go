package scheduler

import (
	"fmt"
	"sort"
	"strings"

	"flotilla.dev/flotilla/api/scheduling"
	corev1 "k8s.io/api/core/v1"
)

// Filter reasons, worded as kube-scheduler words them, so that people and
// tools that know Kubernetes read them unchanged.
const (
	ReasonUnschedulable = "node(s) were unschedulable"
	ReasonNotReady      = "node(s) were not ready"
	ReasonNodeAffinity  = "node(s) didn't match Pod's node affinity/selector"
	ReasonHostPorts     = "node(s) didn't have free ports for the requested pod ports"
	ReasonTooManyPods   = "Too many pods"
)

// ReasonUntoleratedTaint is the reason for a node whose taint the pod does
// not tolerate.
func ReasonUntoleratedTaint(t corev1.Taint) string {
	return fmt.Sprintf("node(s) had untolerated taint {%s: %s}", t.Key, t.Value)
}

// ReasonInsufficient is the reason for a node short of a resource.
func ReasonInsufficient(name corev1.ResourceName) string {
	return "Insufficient " + string(name)
}

// FitError says why a pod fits on no node: for every reason, on how many
// nodes it applied (a node short of both cpu and memory counts for both).
type FitError struct {
	NumAllNodes int
	Reasons     map[string]int
}

// Error is kube-scheduler's message: "0/5 nodes are available: 3
// Insufficient memory, 2 node(s) had untolerated taint {k: v}." with the
// "<count> <reason>" parts sorted as strings.
func (e *FitError) Error() string {
	parts := make([]string, 0, len(e.Reasons))
	for r, n := range e.Reasons {
		parts = append(parts, fmt.Sprintf("%d %s", n, r))
	}
	sort.Strings(parts)
	msg := fmt.Sprintf("0/%d nodes are available:", e.NumAllNodes)
	if len(parts) > 0 {
		msg += " " + strings.Join(parts, ", ") + "."
	}
	return msg
}

const (
	maxNodeScore = 100
	// minFeasibleNodesToFind and the adaptive percentage follow
	// kube-scheduler, whose figures were measured on large clusters.
	minFeasibleNodesToFind    = 100
	minPercentageOfNodesToUse = 5
	spreadWeight              = 2
)

// candidate is a pod being scheduled, with what the filters need computed once.
type candidate struct {
	st                     *podState
	priority               int32
	tolerations            []corev1.Toleration
	matcher                *scheduling.NodeMatcher
	toleratesUnschedulable bool
	// inter is what other pods mean for this attempt (affinity,
	// anti-affinity, spreading); nil when nothing.
	inter *interPod
}

var unschedulableTaint = corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}

func newCandidate(pod *corev1.Pod) *candidate {
	return &candidate{
		st:                     newPodState(pod, ""),
		priority:               scheduling.PodPriority(pod),
		tolerations:            pod.Spec.Tolerations,
		matcher:                scheduling.CompileNodeMatcher(pod),
		toleratesUnschedulable: scheduling.Tolerated(&unschedulableTaint, pod.Spec.Tolerations),
	}
}

// fits is the hot path: no allocation, first failure wins.
func (n *nodeInfo) fits(p *candidate) bool {
	if n.unschedulable && !p.toleratesUnschedulable {
		return false
	}
	for i := range n.taints {
		if !scheduling.Tolerated(&n.taints[i], p.tolerations) {
			return false
		}
	}
	if !n.ready || !p.matcher.Matches(n.labels, n.name) {
		return false
	}
	for _, hp := range p.st.ports {
		for _, q := range n.ports {
			if hp.conflicts(q) {
				return false
			}
		}
	}
	free, count := n.room(p)
	if count+1 > n.allowedPods {
		return false
	}
	r := &p.st.req
	if r.MilliCPU > 0 && r.MilliCPU > free.MilliCPU ||
		r.Memory > 0 && r.Memory > free.Memory ||
		r.EphemeralStorage > 0 && r.EphemeralStorage > free.EphemeralStorage {
		return false
	}
	return p.inter == nil || p.inter.reason(n) == ""
}

// failureReasons is fits with the reasons spelled out; it runs only for
// pods that fit nowhere. Filters run in kube-scheduler's plugin order
// (NodeUnschedulable, TaintToleration, NodeAffinity, NodePorts,
// NodeResourcesFit) and the first failing one gives the reasons, the
// readiness check sitting after taints because an unreachable node is
// tainted and the taint is the more useful answer.
func (n *nodeInfo) failureReasons(p *candidate, out []string) []string {
	if n.unschedulable && !p.toleratesUnschedulable {
		return append(out, ReasonUnschedulable)
	}
	for i := range n.taints {
		if !scheduling.Tolerated(&n.taints[i], p.tolerations) {
			return append(out, ReasonUntoleratedTaint(n.taints[i]))
		}
	}
	if !n.ready {
		return append(out, ReasonNotReady)
	}
	if !p.matcher.Matches(n.labels, n.name) {
		return append(out, ReasonNodeAffinity)
	}
	for _, hp := range p.st.ports {
		for _, q := range n.ports {
			if hp.conflicts(q) {
				return append(out, ReasonHostPorts)
			}
		}
	}
	start := len(out)
	free, count := n.room(p)
	if count+1 > n.allowedPods {
		out = append(out, ReasonTooManyPods)
	}
	r := &p.st.req
	if r.MilliCPU > 0 && r.MilliCPU > free.MilliCPU {
		out = append(out, ReasonInsufficient(corev1.ResourceCPU))
	}
	if r.Memory > 0 && r.Memory > free.Memory {
		out = append(out, ReasonInsufficient(corev1.ResourceMemory))
	}
	if r.EphemeralStorage > 0 && r.EphemeralStorage > free.EphemeralStorage {
		out = append(out, ReasonInsufficient(corev1.ResourceEphemeralStorage))
	}
	if len(out) == start && p.inter != nil {
		// PodTopologySpread and InterPodAffinity come last in
		// kube-scheduler's filter order too.
		if reason := p.inter.reason(n); reason != "" {
			out = append(out, reason)
		}
	}
	if len(out) == start {
		panic(fmt.Sprintf("scheduler: node %s rejected pod without a reason", n.name))
	}
	return out
}

// room is what is free on n for p: allocatable less the bound pods, less
// the pods of at least p's priority nominated here (kube-scheduler
// filters with those added, so that room preemption made is not taken
// by a lesser pod), and the pod count with them.
func (n *nodeInfo) room(p *candidate) (resources, int64) {
	free := n.allocatable
	free.sub(n.requested)
	count := n.podCount
	for _, nm := range n.nominees {
		if nm.key != p.st.key && nm.priority >= p.priority {
			free.sub(nm.req)
			count++
		}
	}
	return free, count
}

func (c *Cache) numFeasibleNodesToFind(all int) int {
	if all < minFeasibleNodesToFind || c.percentage >= 100 {
		return all
	}
	pct := c.percentage
	if pct <= 0 {
		pct = max(50-all/125, minPercentageOfNodesToUse)
	}
	return max(all*pct/100, minFeasibleNodesToFind)
}

// Schedule picks a node for pod and assumes the placement at once, so
// that the next pod sees it; the caller binds and calls Forget if the
// binding fails. It returns *FitError when the pod fits nowhere, and
// ErrNoNodesAvailable when there are no nodes.
func (c *Cache) Schedule(pod *corev1.Pod) (string, error) {
	p := newCandidate(pod)
	key := podKey(pod)

	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.pods[key]; st != nil {
		return "", fmt.Errorf("pod %s/%s on %s: %w", pod.Namespace, pod.Name, st.node, ErrAlreadyAssumed)
	}
	if len(c.order) == 0 {
		return "", ErrNoNodesAvailable
	}
	p.inter = c.interPodFor(pod, p)
	feasible := c.findFeasible(p)
	if len(feasible) == 0 {
		return "", c.diagnose(p)
	}
	best := c.selectHost(p, feasible)
	p.st.node = best.name
	p.st.assumed = true
	c.addPodLocked(key, p.st)
	return best.name, nil
}

func (c *Cache) findFeasible(p *candidate) []*nodeInfo {
	feasible := c.feasible[:0]
	if p.matcher.Names() != nil {
		// The pod names its nodes (DaemonSet pods do): look at those only.
		for name := range p.matcher.Names() {
			if n := c.nodes[name]; n != nil && n.index >= 0 && n.fits(p) {
				feasible = append(feasible, n)
			}
		}
		c.feasible = feasible
		return feasible
	}
	all := len(c.order)
	want := c.numFeasibleNodesToFind(all)
	start := c.next % all
	i := 0
	for ; i < all && len(feasible) < want; i++ {
		n := c.order[(start+i)%all]
		if n.fits(p) {
			feasible = append(feasible, n)
		}
	}
	c.next = (start + i) % all
	c.feasible = feasible
	return feasible
}

func (c *Cache) diagnose(p *candidate) *FitError {
	e := &FitError{NumAllNodes: len(c.order), Reasons: map[string]int{}}
	var buf []string
	for _, n := range c.order {
		buf = n.failureReasons(p, buf[:0])
		for _, r := range buf {
			e.Reasons[r]++
		}
	}
	return e
}

func allocatedScore(requested, allocatable int64) int64 {
	if allocatable <= 0 || requested > allocatable {
		return 0
	}
	return (allocatable - requested) * maxNodeScore / allocatable
}

// selectHost scores the feasible nodes (least allocated, plus spreading
// the pod's workload over nodes and topology values) and picks the best,
// breaking ties at random so equal nodes share the load.
func (c *Cache) selectHost(p *candidate, feasible []*nodeInfo) *nodeInfo {
	if len(feasible) == 1 {
		return feasible[0]
	}
	w := p.st.workload
	wl := c.workloads[w]
	var maxNode, maxZone int
	haveZones := false
	c.gen++
	gen := c.gen
	if wl != nil {
		// Stamp the counts onto the nodes, by whichever is shorter: the
		// workload's nodes or the feasible ones.
		if len(wl.perNode) <= len(feasible) {
			for n, cnt := range wl.perNode {
				n.scratchGen, n.scratchCount = gen, cnt
			}
		} else {
			for _, n := range feasible {
				n.scratchGen, n.scratchCount = gen, wl.perNode[n]
			}
		}
		if cap(c.zoneScratch) < len(c.zoneIDs) {
			c.zoneScratch = make([]int, len(c.zoneIDs))
		}
		c.zoneScratch = c.zoneScratch[:len(c.zoneIDs)]
		clear(c.zoneScratch)
		for z, cnt := range wl.perZone {
			c.zoneScratch[z] = cnt
		}
	}
	nodeCount := func(n *nodeInfo) int {
		if n.scratchGen == gen {
			return n.scratchCount
		}
		return 0
	}
	if wl != nil {
		for _, n := range feasible {
			maxNode = max(maxNode, nodeCount(n))
			if n.zoneID >= 0 {
				haveZones = true
				maxZone = max(maxZone, c.zoneScratch[n.zoneID])
			}
		}
	}

	var extra map[*nodeInfo]int64
	if p.inter != nil && p.inter.scores() {
		extra = p.inter.score(feasible)
	}
	var best *nodeInfo
	var bestScore int64 = -1
	ties := 0
	for _, n := range feasible {
		s := (allocatedScore(n.nonZero.MilliCPU+p.st.nonZero.MilliCPU, n.allocatable.MilliCPU) +
			allocatedScore(n.nonZero.Memory+p.st.nonZero.Memory, n.allocatable.Memory)) / 2
		if wl != nil {
			spread := int64(maxNodeScore)
			if maxNode > 0 {
				spread = int64(maxNode-nodeCount(n)) * maxNodeScore / int64(maxNode)
			}
			if haveZones && n.zoneID >= 0 {
				zone := int64(maxNodeScore)
				if maxZone > 0 {
					zone = int64(maxZone-c.zoneScratch[n.zoneID]) * maxNodeScore / int64(maxZone)
				}
				// Zones weigh three times as much as single nodes: losing
				// a site (often a shop's whole link) should take as few of
				// a workload's replicas as possible.
				spread = (spread + 3*zone) / 4
			}
			s += spreadWeight * spread
		}
		if extra != nil {
			// kube-scheduler weighs these plugins 2 (NodeAffinity,
			// InterPodAffinity, PodTopologySpread).
			s += 2 * extra[n]
		}
		switch {
		case s > bestScore:
			best, bestScore, ties = n, s, 1
		case s == bestScore:
			ties++
			if c.rng.IntN(ties) == 0 {
				best = n
			}
		}
	}
	return best
}
