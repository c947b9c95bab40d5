package scheduler

import (
	"fmt"
	"math"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"flotilla.dev/flotilla/api/scheduling"
)

// Preemption messages, worded as kube-scheduler's DefaultPreemption.
const (
	msgNoVictims           = "No preemption victims found for incoming pod"
	msgNotHelpful          = "Preemption is not helpful for scheduling"
	msgPreemptNever        = "not eligible due to preemptionPolicy=Never."
	msgTerminatingOnTarget = "not eligible due to a terminating pod on the nominated node."
	// minCandidateNodes and minCandidateNodesPercentage bound the dry runs
	// as kube-scheduler's defaults do: enough candidates to choose well,
	// not a dry run on every node of a big fleet.
	minCandidateNodes           = 100
	minCandidateNodesPercentage = 10
)

// Victim is a pod preemption would evict.
type Victim struct {
	Namespace, Name string
	UID             types.UID
	Priority        int32
	key             string
}

// Preemption is the outcome of Cache.Preempt: the node the pod is
// nominated to and the pods to evict there, or, when no node will do,
// Message says why in kube-scheduler's words.
type Preemption struct {
	Node    string
	Victims []Victim
	Message string
}

// preemptor returns why pod may not preempt, or "" when it may.
func (c *Cache) preemptorIneligible(pod *corev1.Pod, prio int32) string {
	if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == corev1.PreemptNever {
		return msgPreemptNever
	}
	nom := pod.Status.NominatedNodeName
	if nm := c.nominated[podKey(pod)]; nm != nil {
		nom = nm.node
	}
	if nom != "" {
		if n := c.nodes[nom]; n != nil {
			for _, q := range n.pods {
				if q.preempted && q.priority < prio {
					// The room is being made; preempting again would
					// evict more than needed.
					return msgTerminatingOnTarget
				}
			}
		}
	}
	return ""
}

// Preempt is kube-scheduler's DefaultPreemption for a pod that fits
// nowhere: on each node where only other pods stand in the way, it
// removes every pod of lower priority in a dry run and, if the pod then
// fits, puts back as many as it can, highest priority first; the pods
// left out are that node's victims. The node chosen has the lowest
// highest-victim priority, then the lowest sum of victim priorities, then
// the fewest victims. No PodDisruptionBudget is consulted: the hub does
// not serve policy/v1. The cache is unchanged when Preempt returns.
func (c *Cache) Preempt(pod *corev1.Pod) Preemption {
	p := newCandidate(pod)
	prio := scheduling.PodPriority(pod)
	c.mu.Lock()
	defer c.mu.Unlock()
	if msg := c.preemptorIneligible(pod, prio); msg != "" {
		return Preemption{Message: msg}
	}
	all := len(c.order)
	want := max(all*minCandidateNodesPercentage/100, minCandidateNodes)
	reasons := map[string]int{}
	type cand struct {
		node    *nodeInfo
		victims []*podState
	}
	var cands []cand
	for i, n := range c.order {
		if len(cands) >= want {
			// Not tried: counted as kube-scheduler counts nodes it did
			// not look at.
			reasons[msgNotHelpful] += all - i
			break
		}
		if !n.staticFits(p) {
			reasons[msgNotHelpful]++
			continue
		}
		victims, ok := c.dryRun(pod, p, n, prio)
		if !ok {
			reasons[msgNoVictims]++
			continue
		}
		cands = append(cands, cand{n, victims})
	}
	if len(cands) == 0 {
		return Preemption{Message: (&FitError{NumAllNodes: all, Reasons: reasons}).Error()}
	}
	best := 0
	for i := 1; i < len(cands); i++ {
		if betterCandidate(cands[i].victims, cands[best].victims) {
			best = i
		}
	}
	out := Preemption{Node: cands[best].node.name}
	for _, v := range cands[best].victims {
		out.Victims = append(out.Victims, Victim{Namespace: v.namespace, Name: v.name, UID: v.uid, Priority: v.priority, key: v.key})
	}
	return out
}

// staticFits is the part of fits that no eviction can change.
func (n *nodeInfo) staticFits(p *candidate) bool {
	if n.unschedulable && !p.toleratesUnschedulable {
		return false
	}
	for i := range n.taints {
		if !scheduling.Tolerated(&n.taints[i], p.tolerations) {
			return false
		}
	}
	return n.ready && p.matcher.Matches(n.labels, n.name)
}

// dryRun finds the fewest, lowest-priority pods on n whose eviction lets
// the pod fit, and restores the cache before it returns.
func (c *Cache) dryRun(pod *corev1.Pod, p *candidate, n *nodeInfo, prio int32) ([]*podState, bool) {
	var lower []*podState
	for _, q := range n.pods {
		if q.priority < prio && !q.assumed {
			lower = append(lower, q)
		}
	}
	if len(lower) == 0 {
		return nil, false
	}
	for _, q := range lower {
		c.removePodLocked(q.key, q)
	}
	removed := map[*podState]bool{}
	for _, q := range lower {
		removed[q] = true
	}
	defer func() {
		for q := range removed {
			c.addPodLocked(q.key, q)
		}
		p.inter = c.interPodFor(pod, p)
	}()
	p.inter = c.interPodFor(pod, p)
	if !n.fits(p) {
		return nil, false
	}
	// Reprieve: the most important pods first, the longest running first
	// among equals, as kube-scheduler.
	sort.Slice(lower, func(i, j int) bool {
		if lower[i].priority != lower[j].priority {
			return lower[i].priority > lower[j].priority
		}
		return lower[i].seq < lower[j].seq
	})
	var victims []*podState
	for _, q := range lower {
		c.addPodLocked(q.key, q)
		delete(removed, q)
		p.inter = c.interPodFor(pod, p)
		if n.fits(p) {
			continue
		}
		c.removePodLocked(q.key, q)
		removed[q] = true
		victims = append(victims, q)
	}
	return victims, true
}

// betterCandidate compares two nodes' victims as kube-scheduler's
// pickOneNodeForPreemption does (without PodDisruptionBudgets).
func betterCandidate(a, b []*podState) bool {
	if ha, hb := highest(a), highest(b); ha != hb {
		return ha < hb
	}
	if sa, sb := prioritySum(a), prioritySum(b); sa != sb {
		return sa < sb
	}
	return len(a) < len(b)
}

func highest(vs []*podState) int32 {
	h := int32(math.MinInt32)
	for _, v := range vs {
		h = max(h, v.priority)
	}
	return h
}

// prioritySum shifts every priority above zero first, as kube-scheduler
// does, so that many negative-priority victims never look cheaper than
// a few.
func prioritySum(vs []*podState) int64 {
	var s int64
	for _, v := range vs {
		s += int64(v.priority) + math.MaxInt32 + 1
	}
	return s
}

// PreemptionMessage is the FailedScheduling message after a preemption
// attempt: the fit error, and kube-scheduler's "preemption: ..." part when
// preemption did not help.
func PreemptionMessage(fit error, pr Preemption) string {
	if pr.Message == "" {
		return fit.Error()
	}
	return strings.TrimSpace(fmt.Sprintf("%s preemption: %s", fit.Error(), pr.Message))
}
