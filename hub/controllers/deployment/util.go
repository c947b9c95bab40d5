package deployment

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Annotations Kubernetes' Deployment controller writes, under the same
// names so kubectl rollout history/undo and describe read them.
const (
	AnnotationRevision        = "deployment.kubernetes.io/revision"
	AnnotationRevisionHistory = "deployment.kubernetes.io/revision-history"
	AnnotationDesiredReplicas = "deployment.kubernetes.io/desired-replicas"
	AnnotationMaxReplicas     = "deployment.kubernetes.io/max-replicas"
	annotationLastApplied     = "kubectl.kubernetes.io/last-applied-configuration"
	annotationRollbackTo      = "deprecated.deployment.rollback.to"

	// maxRevisionHistoryChars bounds revision-history (Kubernetes' value).
	maxRevisionHistoryChars = 2000
)

// Condition reasons, as Kubernetes words them.
const (
	ReasonNewReplicaSetCreated     = "NewReplicaSetCreated"
	ReasonFoundNewReplicaSet       = "FoundNewReplicaSet"
	ReasonReplicaSetUpdated        = "ReplicaSetUpdated"
	ReasonNewReplicaSetAvailable   = "NewReplicaSetAvailable"
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	ReasonFailedReplicaSetCreate   = "ReplicaSetCreateError"
	ReasonDeploymentPaused         = "DeploymentPaused"
	ReasonDeploymentResumed        = "DeploymentResumed"
	// A staged Deployment waits for its RolloutPolicy (a held wave, or
	// one proving itself), then goes on: Flotilla's own reasons.
	ReasonWaitingForRolloutWave      = "WaitingForRolloutWave"
	ReasonRolloutWaveAdmitted        = "RolloutWaveAdmitted"
	ReasonMinimumReplicasAvailable   = "MinimumReplicasAvailable"
	ReasonMinimumReplicasUnavailable = "MinimumReplicasUnavailable"
	// Event reasons.
	ReasonScalingReplicaSet = "ScalingReplicaSet"
	ReasonSelectingAll      = "SelectingAll"
)

// EqualIgnoreHash compares two pod templates ignoring pod-template-hash.
func EqualIgnoreHash(a, b *corev1.PodTemplateSpec) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	delete(a.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	delete(b.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	return apiequality.Semantic.DeepEqual(a, b)
}

func desiredReplicas(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}

func rsReplicas(rs *appsv1.ReplicaSet) int32 {
	if rs == nil || rs.Spec.Replicas == nil {
		return 0
	}
	return *rs.Spec.Replicas
}

func isRollingUpdate(d *appsv1.Deployment) bool {
	return d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType
}

// ResolveFenceposts turns maxSurge and maxUnavailable into replica counts
// for desired replicas: surge rounds up, unavailable rounds down, and if both
// come out zero unavailable becomes 1 so that a rollout can always move.
// Unset values default to 25%, as the API's defaulting does.
func ResolveFenceposts(maxSurge, maxUnavailable *intstr.IntOrString, desired int32) (int32, int32, error) {
	def := intstr.FromString("25%")
	surge, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(maxSurge, def), int(desired), true)
	if err != nil {
		return 0, 0, fmt.Errorf("maxSurge: %w", err)
	}
	unavailable, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(maxUnavailable, def), int(desired), false)
	if err != nil {
		return 0, 0, fmt.Errorf("maxUnavailable: %w", err)
	}
	if surge == 0 && unavailable == 0 {
		unavailable = 1
	}
	return int32(surge), int32(unavailable), nil
}

func rollingParams(d *appsv1.Deployment) (surge, unavailable *intstr.IntOrString) {
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
		return ru.MaxSurge, ru.MaxUnavailable
	}
	return nil, nil
}

// MaxSurge is the resolved maxSurge, 0 for Recreate. Invalid values (which
// validation refuses) count as 0.
func MaxSurge(d *appsv1.Deployment) int32 {
	if !isRollingUpdate(d) {
		return 0
	}
	s, u := rollingParams(d)
	surge, _, _ := ResolveFenceposts(s, u, desiredReplicas(d))
	return surge
}

// MaxUnavailable is the resolved maxUnavailable, at most the replicas.
func MaxUnavailable(d *appsv1.Deployment) int32 {
	if !isRollingUpdate(d) || desiredReplicas(d) == 0 {
		return 0
	}
	s, u := rollingParams(d)
	_, unavailable, _ := ResolveFenceposts(s, u, desiredReplicas(d))
	return min(unavailable, desiredReplicas(d))
}

func sumSpecReplicas(rss []*appsv1.ReplicaSet) int32 {
	var n int32
	for _, rs := range rss {
		n += rsReplicas(rs)
	}
	return n
}

func sumStatus(rss []*appsv1.ReplicaSet, f func(*appsv1.ReplicaSetStatus) int32) int32 {
	var n int32
	for _, rs := range rss {
		if rs != nil {
			n += f(&rs.Status)
		}
	}
	return n
}

func statusReplicas(s *appsv1.ReplicaSetStatus) int32  { return s.Replicas }
func statusReady(s *appsv1.ReplicaSetStatus) int32     { return s.ReadyReplicas }
func statusAvailable(s *appsv1.ReplicaSetStatus) int32 { return s.AvailableReplicas }

// NewRSNewReplicas is how many replicas the new ReplicaSet may have now.
func NewRSNewReplicas(d *appsv1.Deployment, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) int32 {
	if !isRollingUpdate(d) {
		return desiredReplicas(d)
	}
	if rsReplicas(newRS) == desiredReplicas(d) {
		return rsReplicas(newRS)
	}
	maxTotal := desiredReplicas(d) + MaxSurge(d)
	current := sumSpecReplicas(all)
	if current >= maxTotal {
		return rsReplicas(newRS)
	}
	up := min(maxTotal-current, desiredReplicas(d)-rsReplicas(newRS))
	return rsReplicas(newRS) + up
}

func activeRSs(rss []*appsv1.ReplicaSet) []*appsv1.ReplicaSet {
	var out []*appsv1.ReplicaSet
	for _, rs := range rss {
		if rs != nil && rsReplicas(rs) > 0 {
			out = append(out, rs)
		}
	}
	return out
}

// byCreation sorts oldest first, ties by name.
func byCreation(rss []*appsv1.ReplicaSet) {
	sort.SliceStable(rss, func(i, j int) bool {
		a, b := rss[i], rss[j]
		if a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.Name < b.Name
		}
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	})
}

// FindNewReplicaSet returns the oldest ReplicaSet whose template equals the
// Deployment's, ignoring the hash label.
func FindNewReplicaSet(d *appsv1.Deployment, rss []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	sorted := append([]*appsv1.ReplicaSet(nil), rss...)
	byCreation(sorted)
	for _, rs := range sorted {
		if EqualIgnoreHash(&rs.Spec.Template, &d.Spec.Template) {
			return rs
		}
	}
	return nil
}

// Revision parses a revision annotation; missing means 0.
func Revision(obj metav1.Object) (int64, error) {
	v, ok := obj.GetAnnotations()[AnnotationRevision]
	if !ok || v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %q of %s: %w", AnnotationRevision, v, obj.GetName(), err)
	}
	return n, nil
}

func maxRevision(rss []*appsv1.ReplicaSet) int64 {
	var m int64
	for _, rs := range rss {
		if r, err := Revision(rs); err == nil && r > m {
			m = r
		}
	}
	return m
}

func skipCopyAnnotation(k string) bool {
	switch k {
	case annotationLastApplied, AnnotationRevision, AnnotationRevisionHistory,
		AnnotationDesiredReplicas, AnnotationMaxReplicas, annotationRollbackTo:
		return true
	}
	return false
}

// setNewRSAnnotations copies the Deployment's annotations to rs and raises
// its revision to newRevision, keeping the revisions it had before in
// revision-history (a rollback reuses a ReplicaSet). It reports a change.
func setNewRSAnnotations(d *appsv1.Deployment, rs *appsv1.ReplicaSet, newRevision int64, exists bool) bool {
	changed := false
	if rs.Annotations == nil {
		rs.Annotations = map[string]string{}
	}
	for k, v := range d.Annotations {
		if skipCopyAnnotation(k) {
			continue
		}
		if cur, ok := rs.Annotations[k]; ok && cur == v {
			continue
		}
		rs.Annotations[k] = v
		changed = true
	}
	oldRevision, had := rs.Annotations[AnnotationRevision]
	old, err := strconv.ParseInt(oldRevision, 10, 64)
	if err != nil {
		if oldRevision != "" {
			return changed // not ours to fix: leave it alone
		}
		old = 0
	}
	if old < newRevision {
		rs.Annotations[AnnotationRevision] = strconv.FormatInt(newRevision, 10)
		changed = true
		if had {
			hist := rs.Annotations[AnnotationRevisionHistory]
			if hist == "" {
				rs.Annotations[AnnotationRevisionHistory] = oldRevision
			} else {
				parts := strings.Split(hist, ",")
				total := len(hist) + len(oldRevision) + 1
				start := 0
				for total > maxRevisionHistoryChars && start < len(parts) {
					total -= len(parts[start]) + 1
					start++
				}
				if total <= maxRevisionHistoryChars {
					rs.Annotations[AnnotationRevisionHistory] = strings.Join(append(parts[start:], oldRevision), ",")
				}
			}
		}
	}
	if !exists && setReplicasAnnotations(rs, desiredReplicas(d), desiredReplicas(d)+MaxSurge(d)) {
		changed = true
	}
	return changed
}

// setReplicasAnnotations records the Deployment size a ReplicaSet was last
// scaled for; proportional scaling reads it back.
func setReplicasAnnotations(rs *appsv1.ReplicaSet, desired, max int32) bool {
	if rs.Annotations == nil {
		rs.Annotations = map[string]string{}
	}
	d, m := strconv.Itoa(int(desired)), strconv.Itoa(int(max))
	if rs.Annotations[AnnotationDesiredReplicas] == d && rs.Annotations[AnnotationMaxReplicas] == m {
		return false
	}
	rs.Annotations[AnnotationDesiredReplicas] = d
	rs.Annotations[AnnotationMaxReplicas] = m
	return true
}

func intAnnotation(rs *appsv1.ReplicaSet, key string) (int32, bool) {
	v, ok := rs.Annotations[key]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0, false
	}
	return int32(n), true
}

// isSaturated: the ReplicaSet alone carries the whole Deployment.
func isSaturated(d *appsv1.Deployment, rs *appsv1.ReplicaSet) bool {
	if rs == nil {
		return false
	}
	desired, ok := intAnnotation(rs, AnnotationDesiredReplicas)
	return ok && desired == desiredReplicas(d) && rsReplicas(rs) == desiredReplicas(d) &&
		rs.Status.AvailableReplicas == desiredReplicas(d)
}

// findActiveOrLatest returns the only active ReplicaSet, or the newest one
// if none is active, or nil if several are active.
func findActiveOrLatest(newRS *appsv1.ReplicaSet, olds []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	if newRS == nil && len(olds) == 0 {
		return nil
	}
	sorted := append([]*appsv1.ReplicaSet(nil), olds...)
	byCreation(sorted)
	all := activeRSs(append(append([]*appsv1.ReplicaSet(nil), sorted...), newRS))
	switch len(all) {
	case 0:
		if newRS != nil {
			return newRS
		}
		return sorted[len(sorted)-1]
	case 1:
		return all[0]
	}
	return nil
}

// proportion is how many of toAdd replicas (added so far: added) rs gets
// when the Deployment is resized mid-rollout: its share by the size it was
// last scaled for.
func proportion(rs *appsv1.ReplicaSet, d *appsv1.Deployment, toAdd, added int32) int32 {
	if rs == nil || rsReplicas(rs) == 0 || toAdd == 0 || toAdd == added {
		return 0
	}
	var fraction int32
	if desiredReplicas(d) == 0 {
		fraction = -rsReplicas(rs)
	} else {
		total := desiredReplicas(d) + MaxSurge(d)
		annotated, ok := intAnnotation(rs, AnnotationMaxReplicas)
		if !ok || annotated == 0 {
			annotated = d.Status.Replicas
		}
		if annotated == 0 {
			annotated = total
		}
		fraction = int32(math.Round(float64(rsReplicas(rs))*float64(total)/float64(annotated))) - rsReplicas(rs)
	}
	allowed := toAdd - added
	if toAdd > 0 {
		return min(fraction, allowed)
	}
	return max(fraction, allowed)
}

// ---- conditions and status ----

func getCondition(st appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

func newCondition(t appsv1.DeploymentConditionType, s corev1.ConditionStatus, reason, msg string, now time.Time) appsv1.DeploymentCondition {
	return appsv1.DeploymentCondition{Type: t, Status: s, Reason: reason, Message: msg,
		LastUpdateTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
}

// setCondition adds or replaces a condition; the same status and reason
// leave it untouched, the same status keeps its transition time.
func setCondition(st *appsv1.DeploymentStatus, c appsv1.DeploymentCondition) {
	cur := getCondition(*st, c.Type)
	if cur != nil && cur.Status == c.Status && cur.Reason == c.Reason {
		return
	}
	if cur != nil && cur.Status == c.Status {
		c.LastTransitionTime = cur.LastTransitionTime
	}
	removeCondition(st, c.Type)
	st.Conditions = append(st.Conditions, c)
}

func removeCondition(st *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) {
	var out []appsv1.DeploymentCondition
	for _, c := range st.Conditions {
		if c.Type != t {
			out = append(out, c)
		}
	}
	st.Conditions = out
}

func hasProgressDeadline(d *appsv1.Deployment) bool {
	return d.Spec.ProgressDeadlineSeconds != nil && *d.Spec.ProgressDeadlineSeconds != math.MaxInt32
}

// calculateStatus is the Deployment's status from its ReplicaSets.
func calculateStatus(d *appsv1.Deployment, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, now time.Time) appsv1.DeploymentStatus {
	available := sumStatus(all, statusAvailable)
	unavailable := max(sumSpecReplicas(all)-available, 0)
	st := appsv1.DeploymentStatus{
		ObservedGeneration:  d.Generation,
		Replicas:            sumStatus(all, statusReplicas),
		UpdatedReplicas:     sumStatus([]*appsv1.ReplicaSet{newRS}, statusReplicas),
		ReadyReplicas:       sumStatus(all, statusReady),
		AvailableReplicas:   available,
		UnavailableReplicas: unavailable,
		CollisionCount:      d.Status.CollisionCount,
	}
	st.Conditions = append(st.Conditions, d.Status.Conditions...)
	if available >= desiredReplicas(d)-MaxUnavailable(d) {
		setCondition(&st, newCondition(appsv1.DeploymentAvailable, corev1.ConditionTrue, ReasonMinimumReplicasAvailable, "Deployment has minimum availability.", now))
	} else {
		setCondition(&st, newCondition(appsv1.DeploymentAvailable, corev1.ConditionFalse, ReasonMinimumReplicasUnavailable, "Deployment does not have minimum availability.", now))
	}
	return st
}

// deploymentComplete: every replica updated and available, latest spec seen.
func deploymentComplete(d *appsv1.Deployment, st *appsv1.DeploymentStatus) bool {
	n := desiredReplicas(d)
	return st.UpdatedReplicas == n && st.Replicas == n && st.AvailableReplicas == n &&
		st.ObservedGeneration >= d.Generation
}

// deploymentProgressing: the new status moved towards the goal.
func deploymentProgressing(d *appsv1.Deployment, st *appsv1.DeploymentStatus) bool {
	old := d.Status
	return st.UpdatedReplicas > old.UpdatedReplicas ||
		st.Replicas-st.UpdatedReplicas < old.Replicas-old.UpdatedReplicas ||
		st.ReadyReplicas > old.ReadyReplicas ||
		st.AvailableReplicas > old.AvailableReplicas
}

// deploymentTimedOut: no progress recorded for progressDeadlineSeconds.
func deploymentTimedOut(d *appsv1.Deployment, st *appsv1.DeploymentStatus, now time.Time) bool {
	if !hasProgressDeadline(d) {
		return false
	}
	c := getCondition(*st, appsv1.DeploymentProgressing)
	if c == nil {
		return false
	}
	switch c.Reason {
	case ReasonNewReplicaSetAvailable:
		return false
	case ReasonProgressDeadlineExceeded:
		return true
	}
	deadline := c.LastUpdateTime.Add(time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second)
	return deadline.Before(now)
}
