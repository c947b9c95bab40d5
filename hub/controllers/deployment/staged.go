package deployment

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"flotilla.dev/flotilla/hub/controllers/controllerutil"
	"flotilla.dev/flotilla/hub/controllers/replicaset"
	"flotilla.dev/flotilla/hub/controllers/rollout/waves"
	"flotilla.dev/flotilla/internal/controlloop"
)

// Rollouts says which devices may run a Deployment's template when a
// RolloutPolicy stages it (package rollout's DeploymentGate implements it).
type Rollouts interface {
	// PlanFor returns the plan for d's template hash, nil when every
	// device may run it.
	PlanFor(d *appsv1.Deployment, hash string) (*waves.Plan, error)
	// OnChange calls f with the namespace of a policy that changed.
	OnChange(f func(namespace string)) error
	HasSynced() bool
}

// StagedDeletionCost is the pod-deletion-cost the loop gives a pod of a
// staged Deployment that runs a revision its device should not: on an
// admitted wave's device a pod of an older revision, elsewhere a pod of the
// new one. The ReplicaSet loop deletes the lowest cost first, so scaling a
// ReplicaSet down removes those pods and devices of later waves keep
// theirs. The value is one a person is unlikely to choose, so that the
// loop only ever takes back its own.
const StagedDeletionCost = "-2147483647"

// placement is where a staged Deployment's pods stand against its plan.
type placement struct {
	// elsewhere counts the pods that are, or will be, on devices that keep
	// the previous revision: bound there, or unbound and of an old
	// revision (the scheduler sends those only there). The new
	// ReplicaSet may have the rest of the replicas.
	elsewhere int32
	// misplaced are the bound pods running a revision their device should
	// not (to be deleted first); placed are those that run the right one.
	misplaced, placed []*corev1.Pod
}

// place sorts the Deployment's pods (of every ReplicaSet it owns) against
// plan.
func place(pods []*corev1.Pod, plan *waves.Plan) placement {
	var pl placement
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		isNew := p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] == plan.Revision
		node := p.Spec.NodeName
		if node == "" {
			if !isNew {
				pl.elsewhere++
			}
			continue
		}
		admitted := plan.Admits(node)
		if !admitted {
			pl.elsewhere++
		}
		// A held wave's devices keep whichever revision they run.
		if plan.Holds(node) || admitted == isNew {
			pl.placed = append(pl.placed, p)
		} else {
			pl.misplaced = append(pl.misplaced, p)
		}
	}
	return pl
}

// NewTarget is how many replicas the new ReplicaSet of a staged Deployment
// may have: the replicas less those on (or bound for) devices that keep
// the previous revision. New pods go only to admitted devices, and the old
// pods removed are those on admitted devices, so the figure holds still
// while a wave is replaced and grows only as waves are admitted.
func NewTarget(desired int32, pl placement) int32 {
	return max(0, desired-pl.elsewhere)
}

func (s *step) stagedPlan() (*waves.Plan, error) {
	if s.c.rollouts == nil {
		return nil, nil
	}
	return s.c.rollouts.PlanFor(s.d, controllerutil.ComputeHash(&s.d.Spec.Template, s.d.Status.CollisionCount))
}

// podsOf lists the pods of the ReplicaSets in rsList.
func (s *step) podsOf(rsList []*appsv1.ReplicaSet) ([]*corev1.Pod, error) {
	uids := map[types.UID]bool{}
	for _, rs := range rsList {
		uids[rs.UID] = true
	}
	all, err := s.c.podLister.Pods(s.d.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for _, p := range all {
		if ref := metav1.GetControllerOfNoCopy(p); ref != nil && uids[ref.UID] {
			out = append(out, p)
		}
	}
	return out, nil
}

// rolloutStaged moves a Deployment a RolloutPolicy stages one step toward
// its plan: the new ReplicaSet toward NewTarget, the old ones toward the
// rest, within maxSurge and maxUnavailable as a rolling update. A held
// rollout (paused, or a failed wave under Pause) moves nothing. A rolled
// back wave is the same arithmetic the other way: its devices no longer
// count as admitted, so the new ReplicaSet shrinks and the previous one
// grows back.
func (s *step) rolloutStaged(ctx context.Context, rsList []*appsv1.ReplicaSet, plan *waves.Plan) error {
	pods, err := s.podsOf(rsList)
	if err != nil {
		return err
	}
	pl := place(pods, plan)
	desired := desiredReplicas(s.d)
	target := NewTarget(desired, pl)
	if plan.Frozen != waves.None {
		target = -1 // held: create the new ReplicaSet if need be, at no size
	}
	s.newCap = &target
	newRS, olds, err := s.getAllReplicaSetsAndSyncRevision(ctx, rsList, true)
	if err != nil {
		return err
	}
	all := append(append([]*appsv1.ReplicaSet(nil), olds...), newRS)
	if plan.Frozen != waves.None {
		s.waiting = fmt.Sprintf("held by RolloutPolicy %s at wave %s: no replica moves until the policy goes on", plan.Policy, plan.CurrentWave)
		return s.syncRolloutStatus(ctx, all, newRS)
	}
	surge, unavailable := MaxSurge(s.d), MaxUnavailable(s.d)
	if !isRollingUpdate(s.d) {
		// Recreate within a wave: its pods go before the new ones come.
		surge, unavailable = 0, desired
	}
	room := desired + surge - sumSpecReplicas(all)
	oldTarget := desired - target
	oldSum := sumSpecReplicas(olds)

	// Up first, as a rolling update does: the new ReplicaSet, or (a wave
	// rolled back) the previous one.
	if cur := rsReplicas(newRS); cur < target && room > 0 {
		_, _, err := s.scaleRS(ctx, newRS, min(target, cur+room))
		if err != nil {
			return err
		}
		return s.syncRolloutStatus(ctx, all, newRS)
	}
	if prev := findRevision(olds, plan.Previous); prev != nil && oldSum < oldTarget && room > 0 {
		if _, _, err := s.scaleRS(ctx, prev, rsReplicas(prev)+min(oldTarget-oldSum, room)); err != nil {
			return err
		}
		return s.syncRolloutStatus(ctx, all, newRS)
	}

	// Down only once every pod that should go is marked: otherwise the
	// ReplicaSet loop may pick a pod a later wave's device must keep.
	if marked, err := s.markMisplaced(ctx, pl); err != nil || !marked {
		if err == nil {
			s.c.loop.EnqueueAfter(controlloop.ObjectKey(s.d), time.Second)
		}
		return err
	}
	minAvailable := desired - unavailable
	spare := max(0, sumStatus(all, statusAvailable)-minAvailable)
	if cur := rsReplicas(newRS); cur > target {
		n := min(cur-target, spare+(cur-newRS.Status.AvailableReplicas))
		if n > 0 {
			if _, _, err := s.scaleRS(ctx, newRS, cur-n); err != nil {
				return err
			}
			return s.syncRolloutStatus(ctx, all, newRS)
		}
	}
	if oldSum > oldTarget {
		n := min(oldSum-oldTarget, spare+(oldSum-sumStatus(olds, statusAvailable)))
		if _, err := s.scaleDownOlds(ctx, olds, plan.Previous, n); err != nil || n > 0 {
			if err != nil {
				return err
			}
			return s.syncRolloutStatus(ctx, all, newRS)
		}
	}
	// Every ReplicaSet is at the plan's figure and available: what is left
	// is the rollout loop's to decide (the wave proving itself, a rolled
	// back one staying so), which is no failure of the Deployment's to
	// progress.
	if rsReplicas(newRS) == target && newRS.Status.AvailableReplicas == target &&
		oldSum == oldTarget && sumStatus(olds, statusAvailable) == oldTarget {
		s.waiting = waitingMessage(plan)
	}
	return s.syncRolloutStatus(ctx, all, newRS)
}

// waitingMessage says what a staged Deployment whose replicas are where
// its plan puts them waits for.
func waitingMessage(plan *waves.Plan) string {
	if plan.CurrentWave == "" {
		return fmt.Sprintf("waiting for RolloutPolicy %s to record the new template", plan.Policy)
	}
	return fmt.Sprintf("waiting for RolloutPolicy %s: wave %s runs the revision its devices should; the next moves once the policy decides", plan.Policy, plan.CurrentWave)
}

// scaleDownOlds takes n replicas off the old ReplicaSets, the revisions
// neither side of the plan keeps first (oldest first), the previous one
// last.
func (s *step) scaleDownOlds(ctx context.Context, olds []*appsv1.ReplicaSet, previous string, n int32) (int32, error) {
	olds = activeRSs(olds)
	byCreation(olds)
	var order []*appsv1.ReplicaSet
	var prev *appsv1.ReplicaSet
	for _, rs := range olds {
		if rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey] == previous {
			prev = rs
			continue
		}
		order = append(order, rs)
	}
	if prev != nil {
		order = append(order, prev)
	}
	var total int32
	for _, rs := range order {
		if total >= n {
			break
		}
		k := min(rsReplicas(rs), n-total)
		if _, _, err := s.scaleRS(ctx, rs, rsReplicas(rs)-k); err != nil {
			return total, err
		}
		total += k
	}
	return total, nil
}

// markMisplaced gives the misplaced pods StagedDeletionCost and takes it
// back from pods that are where they belong (a rollback turns an admitted
// device back); it reports whether the cache already showed every mark.
func (s *step) markMisplaced(ctx context.Context, pl placement) (bool, error) {
	done := true
	set := func(p *corev1.Pod, value *string) error {
		v := "null"
		if value != nil {
			v = fmt.Sprintf("%q", *value)
		}
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%s}}}`, replicaset.AnnotationPodDeletionCost, v)
		_, err := s.c.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("mark pod %s/%s for a staged rollout: %w", p.Namespace, p.Name, err)
		}
		return nil
	}
	cost := StagedDeletionCost
	for _, p := range pl.misplaced {
		if p.Annotations[replicaset.AnnotationPodDeletionCost] == cost {
			continue
		}
		done = false
		if err := set(p, &cost); err != nil {
			return false, err
		}
	}
	for _, p := range pl.placed {
		if p.Annotations[replicaset.AnnotationPodDeletionCost] == cost {
			if err := set(p, nil); err != nil {
				return false, err
			}
		}
	}
	return done, nil
}

func findRevision(rss []*appsv1.ReplicaSet, hash string) *appsv1.ReplicaSet {
	for _, rs := range rss {
		if rs != nil && hash != "" && rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey] == hash {
			return rs
		}
	}
	return nil
}
