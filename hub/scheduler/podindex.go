package scheduler

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// podIndex finds the pods a term's selector may match without a scan of
// every pod in the cache: each (anti-)affinity term and spread constraint
// was a pass over all of them, which at thousands of pods made scheduling
// a pod with such rules cost milliseconds. The index narrows a selector to
// the pods of one namespace that carry one of its required label pairs,
// and groups existing pods' required anti-affinity by term, so a pod meets
// each distinct term once rather than each pod that has it.
type podIndex struct {
	byNamespace map[string]map[*podState]struct{}
	byLabel     map[labelPair]map[*podState]struct{}
	// anti groups the pods with required anti-affinity by their term.
	anti map[string]*antiGroup
}

type labelPair struct{ namespace, key, value string }

// antiGroup is the pods that hold one required anti-affinity term.
type antiGroup struct {
	term podTerm
	pods map[*podState]struct{}
}

func newPodIndex() podIndex {
	return podIndex{
		byNamespace: map[string]map[*podState]struct{}{},
		byLabel:     map[labelPair]map[*podState]struct{}{},
		anti:        map[string]*antiGroup{},
	}
}

func (x *podIndex) add(st *podState) {
	addTo(x.byNamespace, st.namespace, st)
	for k, v := range st.labels {
		addTo(x.byLabel, labelPair{st.namespace, k, v}, st)
	}
	for i := range st.anti {
		sig := st.anti[i].signature()
		g := x.anti[sig]
		if g == nil {
			g = &antiGroup{term: st.anti[i], pods: map[*podState]struct{}{}}
			x.anti[sig] = g
		}
		g.pods[st] = struct{}{}
	}
}

func (x *podIndex) remove(st *podState) {
	removeFrom(x.byNamespace, st.namespace, st)
	for k, v := range st.labels {
		removeFrom(x.byLabel, labelPair{st.namespace, k, v}, st)
	}
	for i := range st.anti {
		sig := st.anti[i].signature()
		if g := x.anti[sig]; g != nil {
			delete(g.pods, st)
			if len(g.pods) == 0 {
				delete(x.anti, sig)
			}
		}
	}
}

func addTo[K comparable](m map[K]map[*podState]struct{}, k K, st *podState) {
	set := m[k]
	if set == nil {
		set = map[*podState]struct{}{}
		m[k] = set
	}
	set[st] = struct{}{}
}

func removeFrom[K comparable](m map[K]map[*podState]struct{}, k K, st *podState) {
	if set := m[k]; set != nil {
		delete(set, st)
		if len(set) == 0 {
			delete(m, k)
		}
	}
}

// each calls f for every pod in namespaces (nil: every namespace) whose
// labels sel matches.
func (x *podIndex) each(namespaces map[string]bool, sel labels.Selector, f func(*podState)) {
	reqs, selectable := sel.Requirements()
	if !selectable {
		return // labels.Nothing()
	}
	visit := func(ns string) {
		// Of the namespace's pods and the pods with each value a
		// requirement insists on, walk the smallest.
		best := x.byNamespace[ns]
		var bestIn []map[*podState]struct{}
		for _, r := range reqs {
			switch r.Operator() {
			case selection.Equals, selection.DoubleEquals, selection.In:
			default:
				continue
			}
			var sets []map[*podState]struct{}
			total := 0
			for v := range r.Values() {
				if set := x.byLabel[labelPair{ns, r.Key(), v}]; len(set) > 0 {
					sets = append(sets, set)
					total += len(set)
				}
			}
			if total < size(best, bestIn) {
				best, bestIn = nil, sets
				if total == 0 {
					return // no pod has a value the selector requires
				}
			}
		}
		walk := func(set map[*podState]struct{}) {
			for q := range set {
				if sel.Matches(labels.Set(q.labels)) {
					f(q)
				}
			}
		}
		if bestIn == nil {
			walk(best)
			return
		}
		// A pod has one value per key, so the sets of one requirement
		// are disjoint.
		for _, set := range bestIn {
			walk(set)
		}
	}
	if namespaces == nil {
		for ns := range x.byNamespace {
			visit(ns)
		}
		return
	}
	for ns := range namespaces {
		visit(ns)
	}
}

func size(one map[*podState]struct{}, many []map[*podState]struct{}) int {
	if many == nil {
		return len(one)
	}
	n := 0
	for _, s := range many {
		n += len(s)
	}
	return n
}

// signature identifies a term by what it matches: equal terms of many
// pods (the replicas of one workload) share one antiGroup.
func (t *podTerm) signature() string {
	var b strings.Builder
	b.WriteString(t.key)
	b.WriteByte(0)
	if t.namespaces == nil {
		b.WriteByte('*')
	} else {
		ns := make([]string, 0, len(t.namespaces))
		for n := range t.namespaces {
			ns = append(ns, n)
		}
		slices.Sort(ns)
		b.WriteString(strings.Join(ns, ","))
	}
	b.WriteByte(0)
	b.WriteString(t.selector.String())
	return b.String()
}
