package daemonset

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"flotilla.dev/flotilla/hub/controllers/rollout/waves"
)

// ReasonRolloutRevisionMissing: a staged rollout would keep devices on a
// previous revision whose ControllerRevision is gone.
const ReasonRolloutRevisionMissing = "RolloutRevisionMissing"

// Rollouts says which devices may run a DaemonSet's template when a
// RolloutPolicy stages it (package rollout's Gate implements it).
type Rollouts interface {
	// PlanFor returns the plan for ds's template hash over nodes, nil
	// when every device may run it.
	PlanFor(ds *appsv1.DaemonSet, hash string, nodes []*corev1.Node) (*waves.Plan, error)
	// OnChange calls f with the namespace of a policy that changed.
	OnChange(f func(namespace string)) error
	HasSynced() bool
}

// target is a revision a device should run: its hash and template.
type target struct {
	hash string
	tmpl *corev1.PodTemplateSpec
}

// targets is what each device of a DaemonSet should run: the current
// template, unless a staged rollout has not admitted the device's wave, in
// which case the previous revision's.
type targets struct {
	cur  target
	prev *target
	plan *waves.Plan
}

// of is the revision node should run, given its pods: in the frozen wave
// of a held rollout, the one it runs (the previous one if it runs none).
func (t *targets) of(node string, pods []*corev1.Pod) target {
	if t.plan == nil || t.prev == nil {
		return t.cur
	}
	if t.plan.Holds(node) {
		for _, p := range pods {
			if p.DeletionTimestamp == nil && p.Labels[appsv1.ControllerRevisionHashLabelKey] == t.cur.hash {
				return t.cur
			}
		}
		return *t.prev
	}
	if t.plan.Admits(node) {
		return t.cur
	}
	return *t.prev
}

// targetsFor asks the rollouts for ds's plan and loads the previous
// revision's template from its ControllerRevision.
func (c *Controller) targetsFor(ds *appsv1.DaemonSet, hash string, nodes []*corev1.Node) (*targets, error) {
	t := &targets{cur: target{hash: hash, tmpl: &ds.Spec.Template}}
	if c.rollouts == nil {
		return t, nil
	}
	plan, err := c.rollouts.PlanFor(ds, hash, nodes)
	if err != nil || plan == nil {
		return t, err
	}
	revs, err := c.revLister.ControllerRevisions(ds.Namespace).List(labels.SelectorFromSet(labels.Set{appsv1.ControllerRevisionHashLabelKey: plan.Previous}))
	if err != nil {
		return nil, err
	}
	for _, r := range revs {
		if !metav1.IsControlledBy(r, ds) {
			continue
		}
		tmpl, err := revisionTemplate(r)
		if err != nil {
			return nil, fmt.Errorf("daemonset %s/%s: revision %s: %w", ds.Namespace, ds.Name, r.Name, err)
		}
		t.plan, t.prev = plan, &target{hash: plan.Previous, tmpl: tmpl}
		return t, nil
	}
	// Without the previous template there is nothing to hold devices on:
	// say so, and let the current one through rather than stop the
	// DaemonSet altogether.
	c.recorder.Eventf(ds, corev1.EventTypeWarning, ReasonRolloutRevisionMissing,
		"The staged rollout keeps devices on revision %s, but its ControllerRevision is gone: every device gets the current template", plan.Previous)
	return t, nil
}

// revisionTemplate reads the template back from a revision's data (the
// strategic merge patch revisionData writes).
func revisionTemplate(r *appsv1.ControllerRevision) (*corev1.PodTemplateSpec, error) {
	var data struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	raw := r.Data.Raw
	if raw == nil && r.Data.Object != nil {
		var err error
		if raw, err = json.Marshal(r.Data.Object); err != nil {
			return nil, err
		}
	}
	if err := json.Unmarshal(raw, &data); err != nil {
		return nil, fmt.Errorf("reading its template: %w", err)
	}
	return &data.Spec.Template, nil
}
