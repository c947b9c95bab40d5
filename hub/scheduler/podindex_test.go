package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// TestPodIndexMatchesAScan checks the index against the scan it replaces:
// for random pods added and removed and random selectors, each finds
// exactly the pods a pass over all of them would.
func TestPodIndexMatchesAScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(vals ...string) string { return vals[rng.IntN(len(vals))] }
	namespaces := []string{"a", "b", "c"}
	keys := []string{"app", "tier", "ring"}
	values := []string{"x", "y", "z"}

	x := newPodIndex()
	live := map[*podState]struct{}{}
	var all []*podState
	for i := range 400 {
		st := &podState{key: fmt.Sprint(i), namespace: pick(namespaces...), labels: map[string]string{}}
		for _, k := range keys {
			if rng.IntN(3) > 0 {
				st.labels[k] = pick(values...)
			}
		}
		x.add(st)
		live[st] = struct{}{}
		all = append(all, st)
		if rng.IntN(4) == 0 { // remove an earlier pod now and then
			q := all[rng.IntN(len(all))]
			if _, ok := live[q]; ok {
				x.remove(q)
				delete(live, q)
			}
		}
	}

	randomSelector := func() labels.Selector {
		switch rng.IntN(8) {
		case 0:
			return labels.Everything()
		case 1:
			return labels.Nothing()
		}
		sel := labels.NewSelector()
		for range 1 + rng.IntN(2) {
			var r *labels.Requirement
			var err error
			k := pick(keys...)
			switch rng.IntN(5) {
			case 0:
				r, err = labels.NewRequirement(k, selection.Equals, []string{pick(values...)})
			case 1:
				r, err = labels.NewRequirement(k, selection.In, []string{pick(values...), pick(values...), "absent"})
			case 2:
				r, err = labels.NewRequirement(k, selection.NotIn, []string{pick(values...)})
			case 3:
				r, err = labels.NewRequirement(k, selection.Exists, nil)
			default:
				r, err = labels.NewRequirement(k, selection.DoesNotExist, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			sel = sel.Add(*r)
		}
		return sel
	}
	for i := range 500 {
		sel := randomSelector()
		var ns map[string]bool
		if rng.IntN(3) > 0 {
			ns = map[string]bool{pick(namespaces...): true}
			if rng.IntN(2) == 0 {
				ns[pick(namespaces...)] = true
			}
		}
		var want, got []string
		for q := range live {
			if (ns == nil || ns[q.namespace]) && sel.Matches(labels.Set(q.labels)) {
				want = append(want, q.key)
			}
		}
		x.each(ns, sel, func(q *podState) { got = append(got, q.key) })
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("case %d: selector %q in %v: index found %v, a scan %v", i, sel, ns, got, want)
		}
	}
}

// TestAntiAffinityGroupsByTerm checks that the replicas of one workload
// share one group per term, which goes when the last of them does.
func TestAntiAffinityGroupsByTerm(t *testing.T) {
	term := func(app string) podTerm {
		sel, _ := labels.Parse("app=" + app)
		return podTerm{selector: sel, namespaces: map[string]bool{"shop": true}, key: "kubernetes.io/hostname"}
	}
	x := newPodIndex()
	var web []*podState
	for i := range 3 {
		st := &podState{key: fmt.Sprint("web", i), namespace: "shop", labels: map[string]string{"app": "web"}, anti: []podTerm{term("web")}}
		x.add(st)
		web = append(web, st)
	}
	db := &podState{key: "db", namespace: "shop", labels: map[string]string{"app": "db"}, anti: []podTerm{term("db")}}
	x.add(db)
	if len(x.anti) != 2 {
		t.Fatalf("%d anti-affinity groups for two workloads' terms, want 2", len(x.anti))
	}
	webTerm := term("web")
	if g := x.anti[webTerm.signature()]; g == nil || len(g.pods) != 3 {
		t.Fatalf("web's group: %+v, want its 3 replicas", g)
	}
	for _, st := range web {
		x.remove(st)
	}
	if _, ok := x.anti[webTerm.signature()]; ok || len(x.anti) != 1 {
		t.Fatalf("after web's replicas went, groups %v, want only db's", x.anti)
	}
	x.remove(db)
	if len(x.anti) != 0 || len(x.byLabel) != 0 || len(x.byNamespace) != 0 {
		t.Fatalf("empty index keeps %d groups, %d label sets, %d namespaces", len(x.anti), len(x.byLabel), len(x.byNamespace))
	}
}

// TestDomainsFollowTheNodes checks that the cached values of a topology
// key follow nodes that come, change their label and go.
func TestDomainsFollowTheNodes(t *testing.T) {
	c := NewCache(CacheConfig{})
	zone := corev1.LabelTopologyZone
	got := func() []string {
		c.mu.Lock()
		defer c.mu.Unlock()
		v := slices.Clone(c.domainsOf(zone))
		slices.Sort(v)
		return v
	}
	check := func(step string, want ...string) {
		t.Helper()
		if g := got(); !slices.Equal(g, want) {
			t.Fatalf("%s: domains %v, want %v", step, g, want)
		}
	}
	c.SetNode(node("n1", "1", "1Gi", 10, withLabel(zone, "a")))
	c.SetNode(node("n2", "1", "1Gi", 10, withLabel(zone, "b")))
	check("two nodes", "a", "b")
	c.SetNode(node("n2", "1", "1Gi", 10, withLabel(zone, "c")))
	check("n2 moved to c", "a", "c")
	c.SetNode(node("n3", "1", "1Gi", 10))
	check("a node without the key", "a", "c")
	c.DeleteNode("n1")
	check("n1 gone", "c")
}
