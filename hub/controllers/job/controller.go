package job

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api/podutil"
	"flotilla.dev/flotilla/hub/controllers/controllerutil"
	"flotilla.dev/flotilla/internal/controlloop"
)

// Name is the loop's name (manager.Options.Disable).
const Name = "job"

// GVK is the Job kind, for owner references.
var GVK = batchv1.SchemeGroupVersion.WithKind("Job")

// Event reasons, as Kubernetes' Job controller's.
const (
	ReasonCompleted            = "Completed"
	ReasonBackoffLimitExceeded = "BackoffLimitExceeded"
	ReasonDeadlineExceeded     = "DeadlineExceeded"
	ReasonPodFailurePolicy     = "PodFailurePolicy"
	ReasonSuspended            = "Suspended"
	ReasonResumed              = "Resumed"
)

// Backoff before a failed pod is replaced, as Kubernetes'.
const (
	DefaultBackoff = 10 * time.Second
	MaxBackoff     = 6 * time.Minute
)

// Options tune the loop.
type Options struct {
	Clock  clock.Clock
	Logger *slog.Logger
}

// Controller is the Job loop.
type Controller struct {
	client    kubernetes.Interface
	jobLister batchlisters.JobLister
	podLister corelisters.PodLister
	recorder  record.EventRecorder
	clock     clock.Clock
	log       *slog.Logger
	exp       *controllerutil.Expectations
	pods      *controllerutil.PodControl
	loop      *controlloop.Loop
	podEvents *controllerutil.OwnerEvents[*batchv1.Job, *corev1.Pod]
}

// New wires the loop to the factory's Job and Pod informers.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, recorder record.EventRecorder, opts Options) (*Controller, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	jobInf := factory.Batch().V1().Jobs()
	podInf := factory.Core().V1().Pods()
	c := &Controller{
		client: client, jobLister: jobInf.Lister(), podLister: podInf.Lister(), recorder: recorder,
		clock: opts.Clock, log: opts.Logger.With("controller", Name), exp: controllerutil.NewExpectations(opts.Clock),
	}
	c.pods = &controllerutil.PodControl{Client: client, Recorder: recorder, Expectations: c.exp}
	c.loop = controlloop.New(Name, c.sync, controlloop.Options{Logger: opts.Logger})
	if _, err := jobInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.loop.Enqueue,
		UpdateFunc: func(_, cur any) { c.loop.Enqueue(cur) },
		DeleteFunc: func(obj any) {
			if k, err := controlloop.Key(obj); err == nil {
				c.exp.Delete(k)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("job informer: %w", err)
	}
	c.podEvents = &controllerutil.OwnerEvents[*batchv1.Job, *corev1.Pod]{
		Kind: GVK.Kind,
		Get:  func(ns, name string) (*batchv1.Job, error) { return c.jobLister.Jobs(ns).Get(name) },
		Matching: func(p *corev1.Pod) ([]*batchv1.Job, error) {
			jobs, err := c.jobLister.GetPodJobs(p)
			out := make([]*batchv1.Job, len(jobs))
			for i := range jobs {
				out[i] = &jobs[i]
			}
			return out, err
		},
		Loop:                 c.loop,
		Expectations:         c.exp,
		TerminatingIsDeleted: true,
	}
	if _, err := podInf.Informer().AddEventHandler(c.podEvents.Handler()); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	c.loop.WaitFor(jobInf.Informer().HasSynced, podInf.Informer().HasSynced)
	return c, nil
}

// Run runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error { return c.loop.Run(ctx, workers) }

func condition(st *batchv1.JobStatus, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

func isTrue(st *batchv1.JobStatus, t batchv1.JobConditionType) bool {
	c := condition(st, t)
	return c != nil && c.Status == corev1.ConditionTrue
}

// finished reports whether the Job is Complete or Failed, and since when.
func finished(st *batchv1.JobStatus) (bool, time.Time) {
	for _, t := range []batchv1.JobConditionType{batchv1.JobComplete, batchv1.JobFailed} {
		if c := condition(st, t); c != nil && c.Status == corev1.ConditionTrue {
			return true, c.LastTransitionTime.Time
		}
	}
	return false, time.Time{}
}

// setCondition sets a condition, keeping its transition time while its
// status stays.
func setCondition(st *batchv1.JobStatus, t batchv1.JobConditionType, status corev1.ConditionStatus, reason, msg string, now time.Time) {
	c := condition(st, t)
	if c == nil {
		st.Conditions = append(st.Conditions, batchv1.JobCondition{Type: t})
		c = &st.Conditions[len(st.Conditions)-1]
	}
	if c.Status != status {
		c.LastTransitionTime = metav1.NewTime(now)
	}
	c.Status, c.Reason, c.Message, c.LastProbeTime = status, reason, msg, metav1.NewTime(now)
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("job key %q: %w", key, err)
	}
	job, err := c.jobLister.Jobs(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.exp.Delete(key)
		return nil
	}
	if err != nil {
		return err
	}
	if job.DeletionTimestamp != nil {
		return nil
	}
	now := c.clock.Now()
	if done, at := finished(&job.Status); done {
		return c.expire(ctx, job, at, now)
	}
	if !c.exp.Satisfied(key) {
		return nil
	}
	selector, err := metav1.LabelSelectorAsSelector(job.Spec.Selector)
	if err != nil || selector.Empty() {
		c.log.Warn("job without a usable selector", "job", key, "err", err)
		return nil
	}
	pods, err := c.claim(ctx, job, selector)
	if err != nil {
		return err
	}
	st := job.Status.DeepCopy()
	if job.Spec.CompletionMode != nil && *job.Spec.CompletionMode == batchv1.IndexedCompletion {
		return c.syncIndexed(ctx, job, st, pods, now)
	}
	var active, terminating []*corev1.Pod
	var succeeded, failed int32
	var lastFailure time.Time
	failJob := ""
	for _, p := range pods {
		switch {
		case p.Status.Phase == corev1.PodSucceeded:
			succeeded++
		case p.Status.Phase == corev1.PodFailed:
			action := failureAction(job, p)
			if action == batchv1.PodFailurePolicyActionIgnore {
				continue
			}
			if action == batchv1.PodFailurePolicyActionFailJob && failJob == "" {
				failJob = failJobMessage(p)
			}
			failed++
			if t := finishedAt(p); t.After(lastFailure) {
				lastFailure = t
			}
		case p.DeletionTimestamp != nil:
			terminating = append(terminating, p)
		default:
			active = append(active, p)
		}
	}
	// Counts never go down: a finished pod deleted by hand was still a
	// success or a failure.
	st.Succeeded, st.Failed = max(st.Succeeded, succeeded), max(st.Failed, failed)
	countActive(st, active, terminating)
	if failJob != "" {
		return c.fail(ctx, job, st, active, ReasonPodFailurePolicy, failJob, now)
	}
	if stop, err := c.suspendOrStart(ctx, job, st, active, now); stop || err != nil {
		return err
	}
	if limit := ptr.Deref(job.Spec.BackoffLimit, 6); st.Failed > limit {
		return c.fail(ctx, job, st, active, ReasonBackoffLimitExceeded, "Job has reached the specified backoff limit", now)
	}
	completions := job.Spec.Completions
	if (completions != nil && st.Succeeded >= *completions) || (completions == nil && st.Succeeded > 0 && len(active) == 0) {
		return c.complete(ctx, job, st, active, now)
	}
	want := ptr.Deref(job.Spec.Parallelism, 1)
	switch {
	case completions != nil:
		want = min(want, *completions-st.Succeeded)
	case st.Succeeded > 0:
		// A work queue with a success: no new pods, the running ones end.
		want = 0
	}
	if diff := int(want) - len(active); diff > 0 {
		if wait := c.backoff(st.Failed, lastFailure, now); wait > 0 {
			c.loop.EnqueueAfter(key, wait)
		} else {
			created, err := c.createPods(ctx, job, diff)
			// The new pods are active from now on, as Kubernetes counts.
			st.Active += int32(created)
			if err != nil {
				_ = c.writeStatus(ctx, job, st)
				return err
			}
		}
	} else if diff < 0 {
		// Parallelism lowered: the newest pods go first.
		sort.Slice(active, func(i, j int) bool { return active[j].CreationTimestamp.Before(&active[i].CreationTimestamp) })
		if err := c.deletePods(ctx, job, active[:-diff]); err != nil {
			return err
		}
	}
	return c.writeStatus(ctx, job, st)
}

func failJobMessage(p *corev1.Pod) string {
	return fmt.Sprintf("Pod %s/%s matched a rule of the pod failure policy that fails the job", p.Namespace, p.Name)
}

// countActive sets the status' counts of running and stopping pods.
func countActive(st *batchv1.JobStatus, active, terminating []*corev1.Pod) {
	st.Active = int32(len(active))
	st.Terminating = ptr.To(int32(len(terminating)))
	ready := int32(0)
	for _, p := range active {
		if podutil.IsReady(p) {
			ready++
		}
	}
	st.Ready = &ready
}

// suspendOrStart stops a suspended Job's pods (stop is true then), marks
// a resumed one, starts its clock, and fails it past its deadline (stop
// again) or asks to look again at the deadline.
func (c *Controller) suspendOrStart(ctx context.Context, job *batchv1.Job, st *batchv1.JobStatus, active []*corev1.Pod, now time.Time) (stop bool, err error) {
	suspended := job.Spec.Suspend != nil && *job.Spec.Suspend
	switch {
	case suspended:
		if !isTrue(st, batchv1.JobSuspended) {
			setCondition(st, batchv1.JobSuspended, corev1.ConditionTrue, "JobSuspended", "Job suspended", now)
			c.recorder.Event(job, corev1.EventTypeNormal, ReasonSuspended, "Job suspended")
		}
		// A suspended Job's time does not run.
		st.StartTime = nil
		if err := c.deletePods(ctx, job, active); err != nil {
			return true, err
		}
		st.Active = 0
		return true, c.writeStatus(ctx, job, st)
	case isTrue(st, batchv1.JobSuspended):
		setCondition(st, batchv1.JobSuspended, corev1.ConditionFalse, "JobResumed", "Job resumed", now)
		c.recorder.Event(job, corev1.EventTypeNormal, ReasonResumed, "Job resumed")
	}
	if st.StartTime == nil {
		t := metav1.NewTime(now)
		st.StartTime = &t
	}
	if d := job.Spec.ActiveDeadlineSeconds; d != nil {
		deadline := st.StartTime.Add(time.Duration(*d) * time.Second)
		if !now.Before(deadline) {
			return true, c.fail(ctx, job, st, active, ReasonDeadlineExceeded, "Job was active longer than specified deadline", now)
		}
		c.loop.EnqueueAfter(controlloop.ObjectKey(job), deadline.Sub(now))
	}
	return false, nil
}

// complete marks the Job Complete and stops the pods still running.
func (c *Controller) complete(ctx context.Context, job *batchv1.Job, st *batchv1.JobStatus, active []*corev1.Pod, now time.Time) error {
	if err := c.deletePods(ctx, job, active); err != nil {
		return err
	}
	st.Active = 0
	setCondition(st, batchv1.JobSuccessCriteriaMet, corev1.ConditionTrue, "CompletionsReached", "Reached expected number of succeeded pods", now)
	setCondition(st, batchv1.JobComplete, corev1.ConditionTrue, "CompletionsReached", "Reached expected number of succeeded pods", now)
	t := metav1.NewTime(now)
	st.CompletionTime = &t
	c.recorder.Event(job, corev1.EventTypeNormal, ReasonCompleted, "Job completed")
	if err := c.writeStatus(ctx, job, st); err != nil {
		return err
	}
	return c.expire(ctx, job, now, now)
}

// backoff is how long to wait before replacing failed pods: 10 s after
// the first failure, doubling, at most 6 min, counted from the last.
func (c *Controller) backoff(failed int32, last, now time.Time) time.Duration {
	if failed == 0 || last.IsZero() {
		return 0
	}
	d := DefaultBackoff
	for i := int32(1); i < failed && d < MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, MaxBackoff)
	return last.Add(d).Sub(now)
}

func finishedAt(p *corev1.Pod) time.Time {
	var t time.Time
	for _, cs := range p.Status.ContainerStatuses {
		if term := cs.State.Terminated; term != nil && term.FinishedAt.After(t) {
			t = term.FinishedAt.Time
		}
	}
	if t.IsZero() {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.LastTransitionTime.After(t) {
				t = cond.LastTransitionTime.Time
			}
		}
	}
	return t
}

// failureAction is what the Job's pod failure policy says of a failed
// pod: the first rule that matches, or Count.
func failureAction(job *batchv1.Job, p *corev1.Pod) batchv1.PodFailurePolicyAction {
	pol := job.Spec.PodFailurePolicy
	if pol == nil {
		return batchv1.PodFailurePolicyActionCount
	}
	for _, r := range pol.Rules {
		if r.OnExitCodes != nil && exitCodesMatch(r.OnExitCodes, p) {
			return r.Action
		}
		for _, pc := range r.OnPodConditions {
			for _, cond := range p.Status.Conditions {
				if cond.Type == pc.Type && cond.Status == pc.Status {
					return r.Action
				}
			}
		}
	}
	return batchv1.PodFailurePolicyActionCount
}

func exitCodesMatch(req *batchv1.PodFailurePolicyOnExitCodesRequirement, p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		term := cs.State.Terminated
		if term == nil || term.ExitCode == 0 || (req.ContainerName != nil && *req.ContainerName != cs.Name) {
			continue
		}
		in := false
		for _, v := range req.Values {
			in = in || v == term.ExitCode
		}
		if (req.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn) == in {
			return true
		}
	}
	return false
}

// fail marks the Job Failed and stops its running pods.
func (c *Controller) fail(ctx context.Context, job *batchv1.Job, st *batchv1.JobStatus, active []*corev1.Pod, reason, msg string, now time.Time) error {
	if err := c.deletePods(ctx, job, active); err != nil {
		return err
	}
	st.Active = 0
	setCondition(st, batchv1.JobFailureTarget, corev1.ConditionTrue, reason, msg, now)
	setCondition(st, batchv1.JobFailed, corev1.ConditionTrue, reason, msg, now)
	c.recorder.Event(job, corev1.EventTypeWarning, reason, msg)
	if err := c.writeStatus(ctx, job, st); err != nil {
		return err
	}
	return c.expire(ctx, job, now, now)
}

// expire deletes a Job finished at at once its ttlSecondsAfterFinished
// has passed, or asks to look again then.
func (c *Controller) expire(ctx context.Context, job *batchv1.Job, at, now time.Time) error {
	ttl := job.Spec.TTLSecondsAfterFinished
	if ttl == nil {
		return nil
	}
	due := at.Add(time.Duration(*ttl) * time.Second)
	if now.Before(due) {
		c.loop.EnqueueAfter(controlloop.ObjectKey(job), due.Sub(now))
		return nil
	}
	policy := metav1.DeletePropagationBackground
	err := c.client.BatchV1().Jobs(job.Namespace).Delete(ctx, job.Name, metav1.DeleteOptions{
		PropagationPolicy: &policy, Preconditions: &metav1.Preconditions{UID: &job.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting finished job %s/%s: %w", job.Namespace, job.Name, err)
	}
	c.log.Info("finished job deleted (ttlSecondsAfterFinished)", "job", controlloop.ObjectKey(job))
	return nil
}

func (c *Controller) claim(ctx context.Context, job *batchv1.Job, selector labels.Selector) ([]*corev1.Pod, error) {
	all, err := c.podLister.Pods(job.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	claimer := &controllerutil.Claimer[*corev1.Pod]{
		Owner: job, OwnerGVK: GVK, Selector: selector,
		Patch: func(ctx context.Context, name string, data []byte) (*corev1.Pod, error) {
			return c.client.CoreV1().Pods(job.Namespace).Patch(ctx, name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
		},
		CanAdopt: controllerutil.StillOwner(job, func(ctx context.Context) (metav1.Object, error) {
			return c.client.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		}),
	}
	return claimer.Claim(ctx, all)
}

func (c *Controller) createPods(ctx context.Context, job *batchv1.Job, n int) (int, error) {
	key := controlloop.ObjectKey(job)
	c.exp.ExpectCreations(key, n)
	return c.pods.CreatePods(ctx, job, key, n, func(int) (*corev1.Pod, error) {
		return controllerutil.PodFromTemplate(&job.Spec.Template, job, GVK), nil
	})
}

func (c *Controller) deletePods(ctx context.Context, job *batchv1.Job, pods []*corev1.Pod) error {
	if len(pods) == 0 {
		return nil
	}
	key := controlloop.ObjectKey(job)
	keys := make([]string, len(pods))
	for i, p := range pods {
		keys[i] = controlloop.ObjectKey(p)
	}
	c.exp.ExpectDeletions(key, keys)
	return c.pods.DeletePods(ctx, job, key, pods)
}

func (c *Controller) writeStatus(ctx context.Context, job *batchv1.Job, st *batchv1.JobStatus) error {
	if apiequality.Semantic.DeepEqual(&job.Status, st) {
		return nil
	}
	next := job.DeepCopy()
	next.Status = *st
	_, err := c.client.BatchV1().Jobs(job.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("job %s/%s status: %w", job.Namespace, job.Name, err)
	}
	return nil
}
