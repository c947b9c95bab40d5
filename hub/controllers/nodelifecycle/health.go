package nodelifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/scheduling"
)

var labelsEverything = labels.Everything()

// Kubernetes' words for a node that went quiet, kept so that kubectl
// users read what they know.
const (
	reasonStatusUnknown       = "NodeStatusUnknown"
	messageStatusUnknown      = "Kubelet stopped posting node status."
	reasonStatusNeverUpdated  = "NodeStatusNeverUpdated"
	messageStatusNeverUpdated = "Kubelet never posted node status."
)

// nodeHealth is what the monitor remembers of a node between passes.
// Liveness is judged by when this controller *saw* the Lease renew (or the
// Ready heartbeat move), on its own clock, never by the timestamps the
// device wrote: device clocks drift, and a restarted hub starts every
// node with a fresh observation, so none goes Unknown before a full grace
// period has passed.
type nodeHealth struct {
	observed   time.Time
	leaseRenew time.Time
	heartbeat  time.Time
	// taintSeen stands in for an unreachable taint's timeAdded when the
	// taint has none (written by someone else).
	taintSeen time.Time
}

func readyCondition(node *corev1.Node) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

func (c *Controller) observe(node *corev1.Node, now time.Time) *nodeHealth {
	var renew, heartbeat time.Time
	if lease, err := c.leaseLister.Leases(c.cfg.LeaseNamespace).Get(node.Name); err == nil {
		if lease.Spec.RenewTime != nil {
			renew = lease.Spec.RenewTime.Time
		} else if lease.Spec.AcquireTime != nil {
			renew = lease.Spec.AcquireTime.Time
		}
	}
	if ready := readyCondition(node); ready != nil {
		heartbeat = ready.LastHeartbeatTime.Time
	}
	h := c.health[node.Name]
	if h == nil {
		// Nodes there at start count as seen at start; later ones when
		// a pass first meets them. What they wrote before is no sign of
		// life now.
		first := now
		if !c.primed {
			first = c.start
		}
		h = &nodeHealth{observed: first, leaseRenew: renew, heartbeat: heartbeat}
		c.health[node.Name] = h
		return h
	}
	if !renew.Equal(h.leaseRenew) || !heartbeat.Equal(h.heartbeat) {
		h.leaseRenew, h.heartbeat = renew, heartbeat
		h.observed = now
	}
	return h
}

// monitor is one pass over every node: mark the quiet ones Unknown and
// taint them, untaint the ones that came back, mark the pods of Unknown
// nodes not Ready and evict those whose toleration ran out.
func (c *Controller) monitor(ctx context.Context) error {
	now := c.clock.Now()
	// Right after a start every node has just been "seen"; this also
	// holds evictions off, so that devices get a full grace period to
	// reach a restarted hub before anything is decided about them.
	settled := now.Sub(c.start) >= c.cfg.GracePeriod
	nodes, err := c.nodeLister.List(labelsEverything)
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	var errs []error
	var unknown, quiet []*corev1.Node
	seen := make(map[string]bool, len(nodes))
	for _, node := range nodes {
		seen[node.Name] = true
		h := c.observe(node, now)
		stale := settled && now.Sub(h.observed) > c.cfg.GracePeriod
		updated, err := c.updateHealth(ctx, node, h, stale, now)
		if err != nil {
			errs = append(errs, err)
		}
		if r := readyCondition(updated); r != nil && r.Status == corev1.ConditionUnknown {
			unknown = append(unknown, updated)
			if stale {
				quiet = append(quiet, updated)
			}
		}
	}
	for name := range c.health {
		if !seen[name] {
			delete(c.health, name)
		}
	}
	c.primed = true

	disrupted := len(nodes) > 0 && float64(len(quiet)) > c.cfg.DisruptionThreshold*float64(len(nodes))
	if disrupted != c.disrupt {
		c.disrupt = disrupted
		if disrupted {
			c.log.Warn("most nodes are unreachable at once; the hub's own link is the likely fault: evictions stopped",
				"unreachable", len(quiet), "nodes", len(nodes), "threshold", c.cfg.DisruptionThreshold)
		} else {
			c.log.Info("node reachability recovered: evictions resume", "unreachable", len(quiet), "nodes", len(nodes))
		}
	}

	evicting := map[string]bool{}
	for _, node := range quiet {
		evicting[node.Name] = settled && !disrupted && node.Labels[api.LabelAutonomy] != "true"
	}
	for _, node := range unknown {
		if err := c.handlePods(ctx, node, evicting[node.Name], now); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", errPass, errors.Join(errs...))
	}
	return nil
}

// updateHealth marks a stale node Unknown and keeps the unreachable taints
// in line with its Ready condition. It returns the node as last written.
func (c *Controller) updateHealth(ctx context.Context, node *corev1.Node, h *nodeHealth, stale bool, now time.Time) (*corev1.Node, error) {
	ready := readyCondition(node)
	if stale && (ready == nil || ready.Status != corev1.ConditionUnknown) {
		n := node.DeepCopy()
		markUnknown(n, now)
		updated, err := c.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if err != nil {
			return node, fmt.Errorf("node %s: marking Unknown: %w", node.Name, err)
		}
		c.log.Warn("node stopped renewing its lease: Ready=Unknown", "node", node.Name, "lastSeen", h.observed)
		c.recorder.Eventf(updated, corev1.EventTypeNormal, "NodeNotReady", "Node %s status is now: NodeNotReady", node.Name)
		node = updated
		ready = readyCondition(node)
	}
	switch {
	case ready == nil:
		return node, nil
	case ready.Status == corev1.ConditionUnknown:
		return c.setUnreachableTaints(ctx, node, h, true, now)
	default:
		h.taintSeen = time.Time{}
		return c.setUnreachableTaints(ctx, node, h, false, now)
	}
}

func markUnknown(n *corev1.Node, now time.Time) {
	t := metav1.NewTime(now)
	found := false
	for i := range n.Status.Conditions {
		cond := &n.Status.Conditions[i]
		if cond.Type == corev1.NodeReady {
			found = true
		}
		if cond.Status != corev1.ConditionUnknown {
			cond.Status = corev1.ConditionUnknown
			cond.Reason = reasonStatusUnknown
			cond.Message = messageStatusUnknown
			cond.LastTransitionTime = t
		}
	}
	if !found {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{
			Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
			Reason: reasonStatusNeverUpdated, Message: messageStatusNeverUpdated,
			LastHeartbeatTime: n.CreationTimestamp, LastTransitionTime: t,
		})
	}
}

var unreachableEffects = []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute}

func (c *Controller) setUnreachableTaints(ctx context.Context, node *corev1.Node, h *nodeHealth, want bool, now time.Time) (*corev1.Node, error) {
	has := map[corev1.TaintEffect]bool{}
	var kept []corev1.Taint
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeUnreachable {
			has[t.Effect] = true
			if !want {
				continue
			}
		}
		kept = append(kept, t)
	}
	changed := false
	if want {
		for _, e := range unreachableEffects {
			if !has[e] {
				kept = append(kept, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: e, TimeAdded: &metav1.Time{Time: now}})
				changed = true
			}
		}
	} else {
		changed = len(has) > 0
	}
	if !changed {
		return node, nil
	}
	n := node.DeepCopy()
	n.Spec.Taints = kept
	updated, err := c.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	if err != nil {
		return node, fmt.Errorf("node %s: updating unreachable taints: %w", node.Name, err)
	}
	if want {
		h.taintSeen = now
	} else {
		c.log.Info("node reachable again: unreachable taints removed", "node", node.Name)
	}
	return updated, nil
}

// handlePods marks the pods of an Unknown node not Ready and, when evict
// is set, deletes those whose toleration of unreachable has run out.
func (c *Controller) handlePods(ctx context.Context, node *corev1.Node, evict bool, now time.Time) error {
	objs, err := c.podIndexer.ByIndex(podsByNodeIndex, node.Name)
	if err != nil {
		return fmt.Errorf("pods of node %s: %w", node.Name, err)
	}
	taintAdded := c.unreachableSince(node)
	var errs []error
	for _, obj := range objs {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Spec.NodeName != node.Name || pod.DeletionTimestamp != nil {
			continue
		}
		if evict && !exempt(pod) {
			if at, ok := evictionTime(pod, taintAdded); ok && !now.Before(at) {
				if err := c.evict(ctx, pod); err != nil {
					errs = append(errs, err)
				}
				continue
			}
		}
		if err := c.markPodNotReady(ctx, pod, now); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *Controller) unreachableSince(node *corev1.Node) time.Time {
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeUnreachable && t.Effect == corev1.TaintEffectNoExecute && t.TimeAdded != nil {
			return t.TimeAdded.Time
		}
	}
	if h := c.health[node.Name]; h != nil && !h.taintSeen.IsZero() {
		return h.taintSeen
	}
	return c.clock.Now()
}

// exempt pods are never evicted for unreachability: DaemonSet pods belong
// on their node whatever happens, and mirror pods are the device's own
// static pods, which the hub cannot move.
func exempt(pod *corev1.Pod) bool {
	if _, ok := pod.Annotations[api.AnnotationMirrorPod]; ok {
		return true
	}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil && ref.Kind == "DaemonSet" {
		return true
	}
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

var unreachableNoExecute = corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}

// evictionTime is when pod must go from a node unreachable since
// taintAdded: at once without a matching toleration, never with one that
// has no tolerationSeconds, else after the shortest tolerationSeconds.
func evictionTime(pod *corev1.Pod, taintAdded time.Time) (time.Time, bool) {
	var min *int64
	matched := false
	for i := range pod.Spec.Tolerations {
		tol := &pod.Spec.Tolerations[i]
		if !scheduling.ToleratesTaint(tol, &unreachableNoExecute) {
			continue
		}
		if tol.TolerationSeconds == nil {
			return time.Time{}, false
		}
		matched = true
		if min == nil || *tol.TolerationSeconds < *min {
			min = tol.TolerationSeconds
		}
	}
	if !matched {
		return taintAdded, true
	}
	return taintAdded.Add(time.Duration(max(*min, 0)) * time.Second), true
}

func (c *Controller) evict(ctx context.Context, pod *corev1.Pod) error {
	uid := pod.UID
	err := c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("evicting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	c.log.Info("pod evicted from unreachable node", "pod", pod.Namespace+"/"+pod.Name, "node", pod.Spec.NodeName)
	c.recorder.Eventf(pod, corev1.EventTypeNormal, "TaintManagerEviction", "Marking for deletion Pod %s/%s", pod.Namespace, pod.Name)
	return nil
}

// markPodNotReady flips a pod's Ready condition to False, as Kubernetes
// does for the pods of a node it cannot hear from.
func (c *Controller) markPodNotReady(ctx context.Context, pod *corev1.Pod, now time.Time) error {
	idx := -1
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			idx = i
		}
	}
	if idx < 0 || pod.Status.Conditions[idx].Status == corev1.ConditionFalse {
		return nil
	}
	p := pod.DeepCopy()
	p.Status.Conditions[idx].Status = corev1.ConditionFalse
	p.Status.Conditions[idx].LastTransitionTime = metav1.NewTime(now)
	if _, err := c.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("marking pod %s/%s not ready: %w", p.Namespace, p.Name, err)
	}
	return nil
}
