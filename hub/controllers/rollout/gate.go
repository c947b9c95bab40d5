package rollout

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/hub/controllers/daemonset"
	"flotilla.dev/flotilla/hub/controllers/rollout/waves"
	"flotilla.dev/flotilla/internal/controlloop"
)

// Gate answers the DaemonSet loop's question — which devices may run this
// template — from the policies' status.
type Gate struct {
	Policies *Policies
}

var _ daemonset.Rollouts = (*Gate)(nil)

// PlanFor implements daemonset.Rollouts.
func (g *Gate) PlanFor(ds *appsv1.DaemonSet, hash string, nodes []*corev1.Node) (*waves.Plan, error) {
	rp := g.Policies.For(ds.Namespace, ds.Labels)
	if rp == nil {
		return nil, nil
	}
	return waves.PlanFor(rp, waves.Workload{Kind: daemonset.GVK.Kind, Name: ds.Name}, hash, Eligible(ds, nodes))
}

// OnChange calls f with the namespace of every policy that changes: the
// plans of that namespace's DaemonSets may have.
func (g *Gate) OnChange(f func(namespace string)) error {
	ns := func(obj any) {
		if k, err := controlloop.Key(obj); err == nil {
			if n, _, err := cache.SplitMetaNamespaceKey(k); err == nil {
				f(n)
			}
		}
	}
	return g.Policies.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: ns, UpdateFunc: func(_, cur any) { ns(cur) }, DeleteFunc: ns,
	})
}

// HasSynced reports whether the policies are known.
func (g *Gate) HasSynced() bool { return g.Policies.HasSynced() }

// Eligible are the nodes ds should run on: the devices its waves are
// made of.
func Eligible(ds *appsv1.DaemonSet, nodes []*corev1.Node) []*corev1.Node {
	out := make([]*corev1.Node, 0, len(nodes))
	for _, n := range nodes {
		if run, _ := daemonset.ShouldRun(ds, n); run {
			out = append(out, n)
		}
	}
	return out
}
