package scheduling

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// ToleratesTaint reports whether tol tolerates taint, with Kubernetes'
// rules: an empty effect matches every effect, an empty key with Exists
// matches every key, Equal (or no operator) needs equal values.
func ToleratesTaint(tol *corev1.Toleration, taint *corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != taint.Effect {
		return false
	}
	if tol.Key != "" && tol.Key != taint.Key {
		return false
	}
	switch tol.Operator {
	case corev1.TolerationOpExists:
		return true
	case "", corev1.TolerationOpEqual:
		return tol.Value == taint.Value
	default:
		return false
	}
}

// Tolerated reports whether any of tolerations tolerates taint.
func Tolerated(taint *corev1.Taint, tolerations []corev1.Toleration) bool {
	for i := range tolerations {
		if ToleratesTaint(&tolerations[i], taint) {
			return true
		}
	}
	return false
}

// FindUntoleratedTaint returns the first NoSchedule or NoExecute taint
// that none of tolerations tolerates: the taints that keep a pod off a
// node.
func FindUntoleratedTaint(taints []corev1.Taint, tolerations []corev1.Toleration) (corev1.Taint, bool) {
	for i := range taints {
		t := &taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !Tolerated(t, tolerations) {
			return *t, true
		}
	}
	return corev1.Taint{}, false
}

// MatchesNodeSelector reports whether node satisfies pod's nodeSelector
// and its required node affinity: what the scheduler and the DaemonSet
// controller both ask of a node.
func MatchesNodeSelector(pod *corev1.Pod, node *corev1.Node) bool {
	return CompileNodeMatcher(pod).Matches(node.Labels, node.Name)
}

// requirement is one compiled NodeSelectorRequirement.
type requirement struct {
	field   bool // matchFields on metadata.name instead of a label
	key     string
	op      corev1.NodeSelectorOperator
	values  []string
	num     int64 // the bound of Gt and Lt
	invalid bool  // never matches, as Kubernetes treats a requirement it cannot parse
}

// NodeMatcher is a pod's nodeSelector and required node affinity,
// compiled once (the scheduler asks it of many nodes per attempt).
type NodeMatcher struct {
	selector map[string]string
	// terms are ORed; the requirements of a term are ANDed. nil means
	// the pod has no required node affinity.
	terms [][]requirement
	// names, when not nil, is the only set of node names that can match:
	// every term pins metadata.name (as DaemonSet pods do).
	names map[string]struct{}
}

// Names returns the only node names that can match, when every required
// term pins metadata.name (as DaemonSet pods' do), so that a scheduler
// need not look at other nodes; nil otherwise.
func (m *NodeMatcher) Names() map[string]struct{} { return m.names }

// CompileNodeMatcher compiles pod's nodeSelector and required node
// affinity.
func CompileNodeMatcher(pod *corev1.Pod) *NodeMatcher {
	m := &NodeMatcher{selector: pod.Spec.NodeSelector}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return m
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	m.terms = make([][]requirement, 0, len(terms))
	pinned := len(terms) > 0
	names := map[string]struct{}{}
	for _, t := range terms {
		reqs := make([]requirement, 0, len(t.MatchExpressions)+len(t.MatchFields))
		for _, e := range t.MatchExpressions {
			reqs = append(reqs, compileRequirement(e, false))
		}
		termPinned := false
		for _, e := range t.MatchFields {
			r := compileRequirement(e, true)
			if !r.invalid && r.op == corev1.NodeSelectorOpIn {
				termPinned = true
				for _, v := range r.values {
					names[v] = struct{}{}
				}
			}
			reqs = append(reqs, r)
		}
		if !termPinned {
			pinned = false
		}
		m.terms = append(m.terms, reqs)
	}
	if pinned {
		m.names = names
	}
	return m
}

func compileRequirement(e corev1.NodeSelectorRequirement, field bool) requirement {
	r := requirement{field: field, key: e.Key, op: e.Operator, values: e.Values}
	if field {
		// Kubernetes accepts only metadata.name with In or NotIn here.
		r.invalid = e.Key != "metadata.name" || (e.Operator != corev1.NodeSelectorOpIn && e.Operator != corev1.NodeSelectorOpNotIn) || len(e.Values) == 0
		return r
	}
	switch e.Operator {
	case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
		r.invalid = len(e.Values) == 0
	case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
		r.invalid = len(e.Values) != 0
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if len(e.Values) != 1 {
			r.invalid = true
			break
		}
		n, err := strconv.ParseInt(e.Values[0], 10, 64)
		r.num, r.invalid = n, err != nil
	default:
		r.invalid = true
	}
	return r
}

// MatchesAll reports whether every node matches: the pod has no node
// selector and no required node affinity.
func (m *NodeMatcher) MatchesAll() bool { return len(m.selector) == 0 && m.terms == nil }

// Matches reports whether a node with these labels and name satisfies the
// matcher. A requirement Kubernetes would reject never matches.
func (m *NodeMatcher) Matches(labels map[string]string, name string) bool {
	for k, v := range m.selector {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	if m.terms == nil {
		return true
	}
	for _, t := range m.terms {
		if termMatches(t, labels, name) {
			return true
		}
	}
	return false
}

func termMatches(reqs []requirement, labels map[string]string, name string) bool {
	if len(reqs) == 0 {
		return false // an empty term matches nothing
	}
	for i := range reqs {
		if !reqs[i].matches(labels, name) {
			return false
		}
	}
	return true
}

func (r *requirement) matches(labels map[string]string, name string) bool {
	if r.invalid {
		return false
	}
	var v string
	var ok bool
	if r.field {
		v, ok = name, true
	} else {
		v, ok = labels[r.key]
	}
	switch r.op {
	case corev1.NodeSelectorOpIn:
		return ok && contains(r.values, v)
	case corev1.NodeSelectorOpNotIn:
		return !ok || !contains(r.values, v)
	case corev1.NodeSelectorOpExists:
		return ok
	case corev1.NodeSelectorOpDoesNotExist:
		return !ok
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if !ok {
			return false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return false
		}
		if r.op == corev1.NodeSelectorOpGt {
			return n > r.num
		}
		return n < r.num
	}
	return false
}

func contains(values []string, v string) bool {
	for _, x := range values {
		if x == v {
			return true
		}
	}
	return false
}

// CompileNodeSelectorTerm compiles one term (a preferred node affinity
// term's preference, say) into a matcher of that term alone.
func CompileNodeSelectorTerm(t corev1.NodeSelectorTerm) *NodeMatcher {
	reqs := make([]requirement, 0, len(t.MatchExpressions)+len(t.MatchFields))
	for _, e := range t.MatchExpressions {
		reqs = append(reqs, compileRequirement(e, false))
	}
	for _, e := range t.MatchFields {
		reqs = append(reqs, compileRequirement(e, true))
	}
	return &NodeMatcher{terms: [][]requirement{reqs}}
}
