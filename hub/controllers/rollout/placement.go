package rollout

import (
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/hub/controllers/deployment"
	"flotilla.dev/flotilla/hub/controllers/rollout/waves"
)

// ErrNotSynced: the caches a staged Deployment's plan is computed from are
// not filled yet, so no answer can be trusted.
var ErrNotSynced = errors.New("rollout policies, deployments, replicasets or nodes not synced yet")

// DeploymentGate answers, from the policies' status, which devices may run
// a Deployment's new template: the Deployment loop asks it how far to
// scale (deployment.Rollouts), the scheduler where a pod may go
// (scheduler.Placement). Both see the same plan, computed as the rollout
// loop computes its waves.
type DeploymentGate struct {
	policies *Policies
	nodes    corelisters.NodeLister
	dLister  appslisters.DeploymentLister
	rsLister appslisters.ReplicaSetLister
	synced   []cache.InformerSynced
}

var _ deployment.Rollouts = (*DeploymentGate)(nil)

// NewDeploymentGate registers the Node, Deployment and ReplicaSet
// informers it reads with factory.
func NewDeploymentGate(policies *Policies, factory informers.SharedInformerFactory) *DeploymentGate {
	n := factory.Core().V1().Nodes()
	d := factory.Apps().V1().Deployments()
	rs := factory.Apps().V1().ReplicaSets()
	return &DeploymentGate{
		policies: policies, nodes: n.Lister(), dLister: d.Lister(), rsLister: rs.Lister(),
		synced: []cache.InformerSynced{policies.HasSynced, n.Informer().HasSynced, d.Informer().HasSynced, rs.Informer().HasSynced},
	}
}

// HasSynced reports whether every cache the plans come from is filled.
func (g *DeploymentGate) HasSynced() bool {
	for _, s := range g.synced {
		if !s() {
			return false
		}
	}
	return true
}

// PlanFor implements deployment.Rollouts: nil when every device may run
// d's template hash.
func (g *DeploymentGate) PlanFor(d *appsv1.Deployment, hash string) (*waves.Plan, error) {
	rp := g.policies.For(d.Namespace, d.Labels)
	if rp == nil {
		return nil, nil
	}
	nodes, err := g.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	return waves.PlanFor(rp, waves.Workload{Kind: deployment.GVK.Kind, Name: d.Name}, hash, EligibleForDeployment(d, nodes))
}

// OnChange calls f with the namespace of every policy that changes.
func (g *DeploymentGate) OnChange(f func(namespace string)) error {
	return (&Gate{Policies: g.policies}).OnChange(f)
}

// AllowedNodes implements scheduler.Placement. A pod of a staged
// Deployment may go only where its revision belongs: the new template's
// pods to the devices of admitted waves (and of a held wave, which keeps
// both), every other revision's to the devices that keep the previous
// one. restricted is false for any other pod.
func (g *DeploymentGate) AllowedNodes(pod *corev1.Pod) (allowed map[string]struct{}, restricted bool, err error) {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.Kind != "ReplicaSet" {
		return nil, false, nil
	}
	if !g.HasSynced() {
		return nil, false, ErrNotSynced
	}
	rs, err := g.rsLister.ReplicaSets(pod.Namespace).Get(ref.Name)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	dref := metav1.GetControllerOfNoCopy(rs)
	if dref == nil || dref.Kind != deployment.GVK.Kind {
		return nil, false, nil
	}
	d, err := g.dLister.Deployments(pod.Namespace).Get(dref.Name)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	nodes, err := g.nodes.List(labels.Everything())
	if err != nil {
		return nil, false, err
	}
	rp := g.policies.For(d.Namespace, d.Labels)
	if rp == nil {
		return nil, false, nil
	}
	plan, err := waves.PlanFor(rp, waves.Workload{Kind: deployment.GVK.Kind, Name: d.Name}, DeploymentHash(d), EligibleForDeployment(d, nodes))
	if err != nil {
		return nil, false, fmt.Errorf("deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	if plan == nil {
		return nil, false, nil
	}
	isNew := pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey] == plan.Revision
	allowed = map[string]struct{}{}
	for _, n := range nodes {
		if ok := plan.Admits(n.Name) || plan.Holds(n.Name); ok == isNew || plan.Holds(n.Name) {
			allowed[n.Name] = struct{}{}
		}
	}
	return allowed, true, nil
}
