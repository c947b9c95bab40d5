package scheduler

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"flotilla.dev/flotilla/api/scheduling"
)

// Reasons of the filters that look at other pods, worded as
// kube-scheduler's InterPodAffinity and PodTopologySpread plugins word
// them.
const (
	ReasonPodAffinity           = "node(s) didn't match pod affinity rules"
	ReasonPodAntiAffinity       = "node(s) didn't match pod anti-affinity rules"
	ReasonExistingAntiAffinity  = "node(s) didn't satisfy existing pods anti-affinity rules"
	ReasonTopologySpread        = "node(s) didn't match pod topology spread constraints"
	ReasonTopologySpreadMissing = "node(s) didn't match pod topology spread constraints (missing required label)"
)

// podTerm is a compiled pod (anti-)affinity term: pods in namespaces
// (nil: every namespace) whose labels match selector, counted per value of
// the topology key.
type podTerm struct {
	selector   labels.Selector
	namespaces map[string]bool
	key        string
	weight     int32 // preferred terms only
}

func (t *podTerm) matches(namespace string, lbls map[string]string) bool {
	if t.namespaces != nil && !t.namespaces[namespace] {
		return false
	}
	return t.selector.Matches(labels.Set(lbls))
}

// compilePodTerm compiles term of a pod in namespace. A namespaceSelector
// is taken as "every namespace" (the hub keeps no namespace labels for
// it to match): for anti-affinity that keeps more apart, never less.
func compilePodTerm(term *corev1.PodAffinityTerm, namespace string, weight int32) (podTerm, bool) {
	sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
	if err != nil || term.LabelSelector == nil {
		// Kubernetes: a nil selector matches nothing.
		sel = labels.Nothing()
	}
	t := podTerm{selector: sel, key: term.TopologyKey, weight: weight}
	if term.NamespaceSelector == nil {
		t.namespaces = map[string]bool{}
		for _, ns := range term.Namespaces {
			t.namespaces[ns] = true
		}
		if len(term.Namespaces) == 0 {
			t.namespaces[namespace] = true
		}
	}
	return t, t.key != ""
}

// requiredAntiAffinity compiles a pod's required anti-affinity terms (an
// existing pod's, for the symmetric check).
func requiredAntiAffinity(pod *corev1.Pod) []podTerm {
	a := pod.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil {
		return nil
	}
	var out []podTerm
	for i := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if t, ok := compilePodTerm(&a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[i], pod.Namespace, 0); ok {
			out = append(out, t)
		}
	}
	return out
}

// domains is a set of values of one node label.
type domains struct {
	key    string
	values map[string]bool
	reason string
	// any lets every node through (a pod that is the first of the group
	// its affinity names).
	any bool
}

// spread is one topology spread constraint, counted for one attempt.
type spread struct {
	key       string
	maxSkew   int
	counts    map[string]int
	min       int
	selfMatch int
	hard      bool
}

// interPod is what the candidate's placement depends on of other pods,
// computed once per attempt from the cache.
type interPod struct {
	blocked  []domains // a node in any of these fails
	required []domains // a node must be in each of these
	spreads  []spread
	// Scoring.
	preferNode []weightedMatcher
	preferPods []weightedCounts
}

type weightedMatcher struct {
	m      *scheduling.NodeMatcher
	weight int32
}

type weightedCounts struct {
	key    string
	counts map[string]int
	weight int32 // negative for anti-affinity
}

func (ip *interPod) scores() bool {
	return len(ip.preferNode) > 0 || len(ip.preferPods) > 0 || hasSoft(ip.spreads)
}

func hasSoft(ss []spread) bool {
	for _, s := range ss {
		if !s.hard {
			return true
		}
	}
	return false
}

// reason says why node n fails, or "" when it passes.
func (ip *interPod) reason(n *nodeInfo) string {
	for _, s := range ip.spreads {
		if !s.hard {
			continue
		}
		v, ok := n.labels[s.key]
		if !ok {
			return ReasonTopologySpreadMissing
		}
		if s.counts[v]+s.selfMatch-s.min > s.maxSkew {
			return ReasonTopologySpread
		}
	}
	for _, d := range ip.required {
		if d.any {
			continue
		}
		if v, ok := n.labels[d.key]; !ok || !d.values[v] {
			return ReasonPodAffinity
		}
	}
	for _, d := range ip.blocked {
		if v, ok := n.labels[d.key]; ok && d.values[v] {
			return d.reason
		}
	}
	return ""
}

// interPodFor computes the candidate's inter-pod view, or nil when
// nothing about other pods matters to it (the common case, which then
// costs nothing more).
func (c *Cache) interPodFor(pod *corev1.Pod, p *candidate) *interPod {
	ip := &interPod{}
	a := pod.Spec.Affinity
	if a != nil && a.PodAntiAffinity != nil {
		for _, t := range requiredAntiAffinity(pod) {
			c.eachMatchingPod(&t, func(v string) { ip.block(t.key, v, ReasonPodAntiAffinity) })
		}
		for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			if t, ok := compilePodTerm(&w.PodAffinityTerm, pod.Namespace, -w.Weight); ok {
				ip.preferPods = append(ip.preferPods, c.countMatching(&t))
			}
		}
	}
	// Existing pods' required anti-affinity that names the candidate
	// (checked after the pod's own rules, in kube-scheduler's order).
	for _, g := range c.index.anti {
		if !g.term.matches(pod.Namespace, pod.Labels) {
			continue
		}
		for q := range g.pods {
			if n := c.nodes[q.node]; n != nil {
				if v, ok := n.labels[g.term.key]; ok {
					ip.block(g.term.key, v, ReasonExistingAntiAffinity)
				}
			}
		}
	}
	if a != nil && a.PodAffinity != nil {
		for i := range a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			t, ok := compilePodTerm(&a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[i], pod.Namespace, 0)
			if !ok {
				continue
			}
			d := domains{key: t.key, values: map[string]bool{}, reason: ReasonPodAffinity}
			c.eachMatchingPod(&t, func(v string) { d.values[v] = true })
			// The first pod of a group that asks to be near its own kind
			// may go anywhere, or it could never start.
			d.any = len(d.values) == 0 && t.matches(pod.Namespace, pod.Labels)
			ip.required = append(ip.required, d)
		}
		for _, w := range a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			if t, ok := compilePodTerm(&w.PodAffinityTerm, pod.Namespace, w.Weight); ok {
				ip.preferPods = append(ip.preferPods, c.countMatching(&t))
			}
		}
	}
	if a != nil && a.NodeAffinity != nil {
		for _, w := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			ip.preferNode = append(ip.preferNode, weightedMatcher{m: scheduling.CompileNodeSelectorTerm(w.Preference), weight: w.Weight})
		}
	}
	for i := range pod.Spec.TopologySpreadConstraints {
		ip.spreads = append(ip.spreads, c.spreadFor(pod, p, &pod.Spec.TopologySpreadConstraints[i]))
	}
	if len(ip.blocked) == 0 && len(ip.required) == 0 && len(ip.spreads) == 0 && !ip.scores() {
		return nil
	}
	return ip
}

func (ip *interPod) block(key, value, reason string) {
	for i := range ip.blocked {
		if d := &ip.blocked[i]; d.key == key && d.reason == reason {
			d.values[value] = true
			return
		}
	}
	ip.blocked = append(ip.blocked, domains{key: key, values: map[string]bool{value: true}, reason: reason})
}

// eachMatchingPod calls f with the topology value of the node of every
// pod t matches (nodes without the key are skipped).
func (c *Cache) eachMatchingPod(t *podTerm, f func(value string)) {
	c.index.each(t.namespaces, t.selector, func(q *podState) {
		if n := c.nodes[q.node]; n != nil {
			if v, ok := n.labels[t.key]; ok {
				f(v)
			}
		}
	})
}

func (c *Cache) countMatching(t *podTerm) weightedCounts {
	w := weightedCounts{key: t.key, counts: map[string]int{}, weight: t.weight}
	c.eachMatchingPod(t, func(v string) { w.counts[v]++ })
	return w
}

// spreadFor counts constraint k of pod over the nodes it applies to: those
// with the key that pass the pod's node selector and affinity (Honor, the
// default) and, under nodeTaintsPolicy Honor, its tolerations.
func (c *Cache) spreadFor(pod *corev1.Pod, p *candidate, k *corev1.TopologySpreadConstraint) spread {
	s := spread{key: k.TopologyKey, maxSkew: int(k.MaxSkew), counts: map[string]int{}, hard: k.WhenUnsatisfiable != corev1.ScheduleAnyway}
	sel, err := metav1.LabelSelectorAsSelector(k.LabelSelector)
	if err != nil || k.LabelSelector == nil {
		sel = labels.Nothing()
	}
	if len(k.MatchLabelKeys) > 0 {
		// The pod's own values for these keys narrow the selector.
		reqs, _ := sel.Requirements()
		set := labels.NewSelector().Add(reqs...)
		for _, key := range k.MatchLabelKeys {
			if v, ok := pod.Labels[key]; ok {
				if r, err := labels.NewRequirement(key, "=", []string{v}); err == nil {
					set = set.Add(*r)
				}
			}
		}
		sel = set
	}
	honorAffinity := k.NodeAffinityPolicy == nil || *k.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor
	honorTaints := k.NodeTaintsPolicy != nil && *k.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor
	eligible := func(n *nodeInfo) (string, bool) {
		v, ok := n.labels[s.key]
		if !ok || (honorAffinity && !p.matcher.Matches(n.labels, n.name)) {
			return "", false
		}
		if honorTaints {
			for i := range n.taints {
				if !scheduling.Tolerated(&n.taints[i], p.tolerations) {
					return "", false
				}
			}
		}
		return v, true
	}
	if (!honorAffinity || p.matcher.MatchesAll()) && !honorTaints {
		// Every node with the key is eligible.
		for _, v := range c.domainsOf(s.key) {
			s.counts[v] += 0
		}
	} else {
		for _, n := range c.order {
			if v, ok := eligible(n); ok {
				s.counts[v] += 0
			}
		}
	}
	c.index.each(map[string]bool{pod.Namespace: true}, sel, func(q *podState) {
		if n := c.nodes[q.node]; n != nil && n.index >= 0 {
			if v, ok := eligible(n); ok {
				s.counts[v]++
			}
		}
	})
	first := true
	for _, cnt := range s.counts {
		if first || cnt < s.min {
			s.min, first = cnt, false
		}
	}
	if k.MinDomains != nil && len(s.counts) < int(*k.MinDomains) {
		// Fewer domains than asked for: the missing ones count as empty.
		s.min = 0
	}
	if sel.Matches(labels.Set(pod.Labels)) {
		s.selfMatch = 1
	}
	return s
}

// score is the candidate's preference for n among the feasible nodes, 0
// to maxNodeScore: soft spreading, preferred node affinity and preferred
// pod (anti-)affinity, as kube-scheduler's plugins weigh them (each
// normalized over the feasible nodes).
func (ip *interPod) score(feasible []*nodeInfo) map[*nodeInfo]int64 {
	raw := make(map[*nodeInfo]int64, len(feasible))
	for _, n := range feasible {
		var s int64
		for _, w := range ip.preferNode {
			if w.m.Matches(n.labels, n.name) {
				s += int64(w.weight) * 10
			}
		}
		for _, w := range ip.preferPods {
			if v, ok := n.labels[w.key]; ok {
				s += int64(w.weight) * int64(w.counts[v])
			}
		}
		for _, sp := range ip.spreads {
			if sp.hard {
				continue
			}
			// Fewer matching pods in the node's domain is better.
			s -= int64(sp.counts[n.labels[sp.key]]) * 10
		}
		raw[n] = s
	}
	lo, hi := int64(0), int64(0)
	first := true
	for _, s := range raw {
		if first || s < lo {
			lo = s
		}
		if first || s > hi {
			hi = s
		}
		first = false
	}
	for n, s := range raw {
		if hi == lo {
			raw[n] = maxNodeScore
		} else {
			raw[n] = (s - lo) * maxNodeScore / (hi - lo)
		}
	}
	return raw
}
