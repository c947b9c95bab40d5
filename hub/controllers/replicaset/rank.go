package replicaset

import (
	"math"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api/podutil"
)

// AnnotationPodDeletionCost lets a user say which pods to delete first on
// scale-down: lower cost goes first (Kubernetes' annotation).
const AnnotationPodDeletionCost = "controller.kubernetes.io/pod-deletion-cost"

// PodsToDelete picks n of pods to delete, the ones whose loss hurts least.
// related are the pods of the owner's whole family (for a Deployment, every
// ReplicaSet's pods); a pod sharing its node with many of them goes before a
// pod that is alone on its node, so that scale-down also spreads.
func PodsToDelete(pods, related []*corev1.Pod, n int, now time.Time) []*corev1.Pod {
	if n >= len(pods) {
		return pods
	}
	onNode := map[string]int{}
	for _, p := range related {
		if p.Spec.NodeName != "" && podutil.IsActive(p) {
			onNode[p.Spec.NodeName]++
		}
	}
	ranked := make([]rankedPod, len(pods))
	for i, p := range pods {
		ranked[i] = rankedPod{pod: p}
		if p.Spec.NodeName != "" {
			ranked[i].rank = onNode[p.Spec.NodeName]
		}
	}
	sort.SliceStable(ranked, func(i, j int) bool { return deleteFirst(ranked[i], ranked[j], now) })
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = ranked[i].pod
	}
	return out
}

type rankedPod struct {
	pod  *corev1.Pod
	rank int
}

var phaseOrder = map[corev1.PodPhase]int{corev1.PodPending: 0, corev1.PodUnknown: 1, corev1.PodRunning: 2}

// deleteFirst is Kubernetes' ActivePodsWithRanks ordering with logarithmic
// scale-down: timestamps are compared by the power of two of their age, so
// pods of similar age are treated alike and ties fall to the UID (random).
func deleteFirst(a, b rankedPod, now time.Time) bool {
	p, q := a.pod, b.pod
	// Unassigned before assigned.
	if (p.Spec.NodeName == "") != (q.Spec.NodeName == "") {
		return p.Spec.NodeName == ""
	}
	// Pending before Unknown before Running.
	if phaseOrder[p.Status.Phase] != phaseOrder[q.Status.Phase] {
		return phaseOrder[p.Status.Phase] < phaseOrder[q.Status.Phase]
	}
	// Not ready before ready.
	if podutil.IsReady(p) != podutil.IsReady(q) {
		return !podutil.IsReady(p)
	}
	// Lower deletion cost first.
	if cp, cq := deletionCost(p), deletionCost(q); cp != cq {
		return cp < cq
	}
	// Doubled up on a node before alone.
	if a.rank != b.rank {
		return a.rank > b.rank
	}
	// Ready for less time before ready for longer.
	if podutil.IsReady(p) && podutil.IsReady(q) {
		tp, tq := podutil.ReadySince(p), podutil.ReadySince(q)
		if !tp.Equal(tq) {
			if d := logRankDiff(tp, tq, now); d != 0 {
				return d < 0
			}
			return p.UID < q.UID
		}
	}
	// More restarts first.
	if rp, rq := maxContainerRestarts(p), maxContainerRestarts(q); rp != rq {
		return rp > rq
	}
	// Newer before older.
	if !p.CreationTimestamp.Equal(&q.CreationTimestamp) {
		if d := logRankDiff(&p.CreationTimestamp, &q.CreationTimestamp, now); d != 0 {
			return d < 0
		}
		return p.UID < q.UID
	}
	return false
}

func deletionCost(p *corev1.Pod) int64 {
	v, ok := p.Annotations[AnnotationPodDeletionCost]
	if !ok {
		return 0
	}
	// An unparsable cost counts as the default, as in Kubernetes (admission
	// refuses it there; here it must simply not break scale-down).
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0
	}
	return n
}

// logRankDiff compares the ages of t1 and t2 at now in powers of two; a
// zero time counts as newest.
func logRankDiff(t1, t2 *metav1.Time, now time.Time) int64 {
	rank := func(t *metav1.Time) int64 {
		if t == nil || t.IsZero() {
			return -2
		}
		d := now.Sub(t.Time)
		if d <= 0 {
			return -1
		}
		return int64(math.Log2(float64(d)))
	}
	return rank(t1) - rank(t2)
}

func maxContainerRestarts(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n = max(n, c.RestartCount)
	}
	return n
}
