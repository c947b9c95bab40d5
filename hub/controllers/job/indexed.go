package job

import (
	"context"
	"sort"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/hub/controllers/controllerutil"
	"flotilla.dev/flotilla/internal/controlloop"
)

// Event and condition reasons of Indexed Jobs, as Kubernetes'.
const (
	ReasonFailedIndexes            = "FailedIndexes"
	ReasonMaxFailedIndexesExceeded = "MaxFailedIndexesExceeded"
)

// indexTally is what an Indexed Job's pods say, index by index.
type indexTally struct {
	done, failed indexSet
	// failures counts each index's failed pods that count (the policy
	// did not ignore them); lastFailure is when the latest ended.
	failures    map[int]int32
	lastFailure map[int]time.Time
	active      map[int][]*corev1.Pod
	// stray are running pods with no index of this Job, or a second pod
	// of an index: they go.
	stray       []*corev1.Pod
	terminating []*corev1.Pod
	failedPods  int32
	lastAny     time.Time
	failJob     string
}

// syncIndexed runs an Indexed Job: one successful pod per index in
// [0, completions), at most parallelism at once, the lowest indexes
// first. Without backoffLimitPerIndex, failures count against backoffLimit
// as in a NonIndexed Job; with it, an index fails once its own failures
// pass the limit (or at once, for a pod failure policy's FailIndex), the
// others go on, and the Job fails past maxFailedIndexes or, at the end,
// with any index failed.
func (c *Controller) syncIndexed(ctx context.Context, job *batchv1.Job, st *batchv1.JobStatus, pods []*corev1.Pod, now time.Time) error {
	completions := ptr.Deref(job.Spec.Completions, 0)
	perIndex := job.Spec.BackoffLimitPerIndex
	t := indexTally{failures: map[int]int32{}, lastFailure: map[int]time.Time{}, active: map[int][]*corev1.Pod{}}
	var err error
	// Indexes recorded once stay: their pods may be gone since.
	if t.done, err = parseIndexes(st.CompletedIndexes, completions); err != nil {
		c.log.Warn("unreadable completedIndexes, counting from the pods", "job", controlloop.ObjectKey(job), "err", err)
	}
	if t.failed, err = parseIndexes(ptr.Deref(st.FailedIndexes, ""), completions); err != nil {
		c.log.Warn("unreadable failedIndexes, counting from the pods", "job", controlloop.ObjectKey(job), "err", err)
	}
	for _, p := range pods {
		idx, ok := podIndex(p, completions)
		switch {
		case p.Status.Phase == corev1.PodSucceeded:
			if ok && !t.failed.has(idx) {
				t.done[idx] = struct{}{}
			}
		case p.Status.Phase == corev1.PodFailed:
			action := failureAction(job, p)
			if action == batchv1.PodFailurePolicyActionIgnore {
				continue
			}
			if action == batchv1.PodFailurePolicyActionFailJob && t.failJob == "" {
				t.failJob = failJobMessage(p)
			}
			t.failedPods++
			at := finishedAt(p)
			t.lastAny = later(t.lastAny, at)
			if !ok {
				continue
			}
			t.failures[idx]++
			t.lastFailure[idx] = later(t.lastFailure[idx], at)
			if perIndex != nil && !t.done.has(idx) && (action == batchv1.PodFailurePolicyActionFailIndex || t.failures[idx] > *perIndex) {
				t.failed[idx] = struct{}{}
			}
		case p.DeletionTimestamp != nil:
			t.terminating = append(t.terminating, p)
		case !ok:
			t.stray = append(t.stray, p)
		default:
			t.active[idx] = append(t.active[idx], p)
		}
	}
	var active []*corev1.Pod
	for idx, ps := range t.active {
		if t.done.has(idx) || t.failed.has(idx) {
			t.stray = append(t.stray, ps...)
			continue
		}
		// One pod per index: the oldest stays.
		sort.Slice(ps, func(i, j int) bool { return ps[i].CreationTimestamp.Before(&ps[j].CreationTimestamp) })
		active = append(active, ps[0])
		t.stray = append(t.stray, ps[1:]...)
	}
	if err := c.deletePods(ctx, job, t.stray); err != nil {
		return err
	}
	st.Succeeded = max(st.Succeeded, int32(len(t.done)))
	st.Failed = max(st.Failed, t.failedPods)
	st.CompletedIndexes = t.done.String()
	if perIndex != nil {
		st.FailedIndexes = ptr.To(t.failed.String())
	}
	countActive(st, active, append(t.terminating, t.stray...))
	if t.failJob != "" {
		return c.fail(ctx, job, st, active, ReasonPodFailurePolicy, t.failJob, now)
	}
	if stop, err := c.suspendOrStart(ctx, job, st, active, now); stop || err != nil {
		return err
	}
	if m := job.Spec.MaxFailedIndexes; m != nil && int32(len(t.failed)) > *m {
		return c.fail(ctx, job, st, active, ReasonMaxFailedIndexesExceeded, "Job has exceeded the specified maximal number of failed indexes", now)
	}
	if limit := ptr.Deref(job.Spec.BackoffLimit, 6); st.Failed > limit {
		return c.fail(ctx, job, st, active, ReasonBackoffLimitExceeded, "Job has reached the specified backoff limit", now)
	}
	if int32(len(t.done)+len(t.failed)) >= completions {
		if len(t.failed) > 0 {
			return c.fail(ctx, job, st, active, ReasonFailedIndexes, "Job has failed indexes", now)
		}
		return c.complete(ctx, job, st, active, now)
	}
	want := int(min(ptr.Deref(job.Spec.Parallelism, 1), completions-int32(len(t.done)+len(t.failed))))
	if diff := want - len(active); diff < 0 {
		// Parallelism lowered: the highest indexes go first.
		sort.Slice(active, func(i, j int) bool {
			a, _ := podIndex(active[i], completions)
			b, _ := podIndex(active[j], completions)
			return a > b
		})
		if err := c.deletePods(ctx, job, active[:-diff]); err != nil {
			return err
		}
		st.Active = int32(want)
		return c.writeStatus(ctx, job, st)
	}
	// The lowest indexes with no pod, not finished, and past their backoff.
	var next []int
	var wait time.Duration
	for idx := 0; idx < int(completions) && len(next) < want-len(active); idx++ {
		if t.done.has(idx) || t.failed.has(idx) || len(t.active[idx]) > 0 {
			continue
		}
		// Per index, each index waits after its own failures; otherwise
		// the Job's failures hold back every new pod, as in NonIndexed.
		d := c.backoff(st.Failed, t.lastAny, now)
		if perIndex != nil {
			d = c.backoff(t.failures[idx], t.lastFailure[idx], now)
		}
		if d > 0 {
			if wait == 0 || d < wait {
				wait = d
			}
			continue
		}
		next = append(next, idx)
	}
	if wait > 0 {
		c.loop.EnqueueAfter(controlloop.ObjectKey(job), wait)
	}
	if len(next) > 0 {
		created, err := c.createIndexed(ctx, job, next, t.failures)
		st.Active += int32(created)
		if err != nil {
			_ = c.writeStatus(ctx, job, st)
			return err
		}
	}
	return c.writeStatus(ctx, job, st)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (c *Controller) createIndexed(ctx context.Context, job *batchv1.Job, indexes []int, failures map[int]int32) (int, error) {
	key := controlloop.ObjectKey(job)
	c.exp.ExpectCreations(key, len(indexes))
	return c.pods.CreatePods(ctx, job, key, len(indexes), func(i int) (*corev1.Pod, error) {
		p := controllerutil.PodFromTemplate(&job.Spec.Template, job, GVK)
		indexPod(p, job, indexes[i], failures[indexes[i]])
		return p, nil
	})
}
