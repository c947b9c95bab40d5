package cronjob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"time"

	"github.com/robfig/cron/v3"
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
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/hub/controllers/controllerutil"
	"flotilla.dev/flotilla/internal/controlloop"
)

// Name is the loop's name (manager.Options.Disable).
const Name = "cronjob"

// GVK is the CronJob kind, for owner references.
var GVK = batchv1.SchemeGroupVersion.WithKind("CronJob")

// Event reasons, as Kubernetes' CronJob controller's.
const (
	ReasonSuccessfulCreate    = "SuccessfulCreate"
	ReasonFailedCreate        = "FailedCreate"
	ReasonSuccessfulDelete    = "SuccessfulDelete"
	ReasonFailedDelete        = "FailedDelete"
	ReasonSawCompletedJob     = "SawCompletedJob"
	ReasonMissSchedule        = "MissSchedule"
	ReasonTooManyMissedTimes  = "TooManyMissedTimes"
	ReasonJobAlreadyActive    = "JobAlreadyActive"
	ReasonUnparseableSchedule = "UnparseableSchedule"
	ReasonUnknownTimeZone     = "UnknownTimeZone"
)

// maxMissed is how many missed runs Kubernetes counts before it warns
// that the clock or the deadline is wrong.
const maxMissed = 100

// nextDelta is added to the wait for the next run: woken at the exact
// second, the pass could read a clock a hair before it.
const nextDelta = 100 * time.Millisecond

// Options tune the loop.
type Options struct {
	Clock  clock.Clock
	Logger *slog.Logger
}

// Controller is the CronJob loop.
type Controller struct {
	client    kubernetes.Interface
	cjLister  batchlisters.CronJobLister
	jobLister batchlisters.JobLister
	recorder  record.EventRecorder
	clock     clock.Clock
	log       *slog.Logger
	loop      *controlloop.Loop
	// requeue asks for another pass after d (the loop's queue; tests
	// read it).
	requeue func(key string, d time.Duration)
}

// New wires the loop to the factory's CronJob and Job informers.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, recorder record.EventRecorder, opts Options) (*Controller, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	cjInf := factory.Batch().V1().CronJobs()
	jobInf := factory.Batch().V1().Jobs()
	c := &Controller{client: client, cjLister: cjInf.Lister(), jobLister: jobInf.Lister(), recorder: recorder,
		clock: opts.Clock, log: opts.Logger.With("controller", Name)}
	c.loop = controlloop.New(Name, c.sync, controlloop.Options{Logger: opts.Logger})
	c.requeue = c.loop.EnqueueAfter
	if _, err := cjInf.Informer().AddEventHandler(c.loop.Handler()); err != nil {
		return nil, fmt.Errorf("cronjob informer: %w", err)
	}
	// A Job's changes wake its CronJob: a finished run frees a Forbid
	// schedule and goes into the history.
	owner := func(obj any) {
		j, ok := controlloop.Deleted[*batchv1.Job](obj)
		if !ok {
			return
		}
		if cj, ok := controllerutil.ResolveController(j.Namespace, metav1.GetControllerOfNoCopy(j), GVK.Kind,
			func(ns, name string) (*batchv1.CronJob, error) { return c.cjLister.CronJobs(ns).Get(name) }); ok {
			c.loop.Enqueue(cj)
		}
	}
	if _, err := jobInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: owner, UpdateFunc: func(_, cur any) { owner(cur) }, DeleteFunc: owner,
	}); err != nil {
		return nil, fmt.Errorf("job informer: %w", err)
	}
	c.loop.WaitFor(cjInf.Informer().HasSynced, jobInf.Informer().HasSynced)
	return c, nil
}

// Run runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error { return c.loop.Run(ctx, workers) }

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("cronjob key %q: %w", key, err)
	}
	cj, err := c.cjLister.CronJobs(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	jobs, err := c.ownedJobs(cj)
	if err != nil {
		return err
	}
	st := cj.Status.DeepCopy()
	c.trackActive(cj, st, jobs)
	if err := c.trimHistory(ctx, cj, jobs); err != nil {
		return err
	}
	if cj.DeletionTimestamp != nil || ptr.Deref(cj.Spec.Suspend, false) {
		return c.writeStatus(ctx, cj, st)
	}
	loc, sched, ok := c.schedule(cj)
	if !ok {
		return c.writeStatus(ctx, cj, st)
	}
	now := c.clock.Now().In(loc)
	defer func() {
		// Whatever this pass did, look again at the next run.
		if next := sched.Next(now); !next.IsZero() {
			c.requeue(key, next.Sub(now)+nextDelta)
		}
	}()
	scheduled, missed := mostRecent(cj, sched, now)
	if scheduled.IsZero() {
		return c.writeStatus(ctx, cj, st)
	}
	if d := cj.Spec.StartingDeadlineSeconds; d != nil {
		// Runs older than the deadline could not start anyway: only those
		// within it count as missed, as Kubernetes counts.
		_, missed = mostRecent(cj, sched, now, now.Add(-time.Duration(*d)*time.Second))
	}
	if missed > maxMissed {
		c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonTooManyMissedTimes,
			"too many missed start times: %d. Set or decrease .spec.startingDeadlineSeconds or check clock skew", missed)
	}
	jobName := JobName(cj, scheduled)
	if (st.LastScheduleTime != nil && !st.LastScheduleTime.Time.Before(scheduled)) || hasJob(jobs, jobName) {
		// This run was started (and may be over already).
		return c.writeStatus(ctx, cj, st)
	}
	if d := cj.Spec.StartingDeadlineSeconds; d != nil && scheduled.Add(time.Duration(*d)*time.Second).Before(now) {
		c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonMissSchedule, "Missed scheduled time to start a job: %s", scheduled.Format(time.RFC1123Z))
		return c.writeStatus(ctx, cj, st)
	}
	switch cj.Spec.ConcurrencyPolicy {
	case batchv1.ForbidConcurrent:
		if len(st.Active) > 0 {
			// When the active run ends, its Job's update wakes this loop
			// and the run starts then, if still within its deadline.
			c.recorder.Event(cj, corev1.EventTypeNormal, ReasonJobAlreadyActive, "Not starting job because prior execution is running and concurrency policy is Forbid")
			return c.writeStatus(ctx, cj, st)
		}
	case batchv1.ReplaceConcurrent:
		for _, ref := range st.Active {
			if err := c.deleteJob(ctx, cj, ref.Name, ref.UID); err != nil {
				return err
			}
		}
		st.Active = nil
	}
	job, err := c.createJob(ctx, cj, jobName, scheduled)
	if err != nil {
		_ = c.writeStatus(ctx, cj, st)
		return err
	}
	st.Active = append(st.Active, jobRef(job))
	t := metav1.NewTime(scheduled)
	st.LastScheduleTime = &t
	return c.writeStatus(ctx, cj, st)
}

// schedule reads the CronJob's zone and schedule (validation checked
// both; a bad one stored before says so in an event, and waits for an
// edit).
func (c *Controller) schedule(cj *batchv1.CronJob) (*time.Location, cron.Schedule, bool) {
	loc := time.Local
	if tz := cj.Spec.TimeZone; tz != nil {
		l, err := time.LoadLocation(*tz)
		if err != nil {
			c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonUnknownTimeZone, "invalid timeZone: %q: %s", *tz, err)
			return nil, nil, false
		}
		loc = l
	}
	sched, err := cron.ParseStandard(cj.Spec.Schedule)
	if err != nil {
		c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonUnparseableSchedule, "unparseable schedule: %q : %s", cj.Spec.Schedule, err)
		return nil, nil, false
	}
	return loc, sched, true
}

// mostRecent is the latest run time not after now since the CronJob was
// last scheduled (or created, or since, when later), and how many runs
// were due since (counted up to a little past maxMissed); zero if none
// is due. A run missed by more than startingDeadlineSeconds is still
// found, so that it is reported.
func mostRecent(cj *batchv1.CronJob, sched cron.Schedule, now time.Time, since ...time.Time) (time.Time, int) {
	earliest := cj.CreationTimestamp.Time
	if t := cj.Status.LastScheduleTime; t != nil {
		earliest = t.Time
	}
	for _, t := range since {
		if t.After(earliest) {
			earliest = t
		}
	}
	earliest = earliest.In(now.Location())
	var last time.Time
	n := 0
	for t := sched.Next(earliest); !t.IsZero() && !t.After(now); t = sched.Next(t) {
		last, n = t, n+1
		if n > maxMissed {
			return latestBefore(sched, last, now), n
		}
	}
	return last, n
}

// latestBefore finds the last run time not after now, from a known one
// (from) far behind: it looks back from now over doubling windows until
// one holds a run, so a year of missed minutes costs a few steps, not
// half a million.
func latestBefore(sched cron.Schedule, from, now time.Time) time.Time {
	for d := time.Minute; ; d *= 2 {
		start := now.Add(-d)
		if !start.After(from) {
			start = from
		}
		if t := sched.Next(start); t.IsZero() || t.After(now) {
			if start.Equal(from) {
				return from
			}
			continue
		}
		last := start
		for t := sched.Next(start); !t.IsZero() && !t.After(now); t = sched.Next(t) {
			last = t
		}
		return last
	}
}

// JobName is the name of the Job of the run scheduled at t:
// <cronjob>-<minutes since the epoch>, as Kubernetes names it.
func JobName(cj *batchv1.CronJob, t time.Time) string {
	return fmt.Sprintf("%s-%d", cj.Name, t.Unix()/60)
}

func hasJob(jobs []*batchv1.Job, name string) bool {
	for _, j := range jobs {
		if j.Name == name {
			return true
		}
	}
	return false
}

func (c *Controller) ownedJobs(cj *batchv1.CronJob) ([]*batchv1.Job, error) {
	all, err := c.jobLister.Jobs(cj.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []*batchv1.Job
	for _, j := range all {
		if ref := metav1.GetControllerOfNoCopy(j); ref != nil && ref.UID == cj.UID {
			out = append(out, j)
		}
	}
	return out, nil
}

func jobFinished(j *batchv1.Job) (bool, batchv1.JobConditionType) {
	for _, cond := range j.Status.Conditions {
		if (cond.Type == batchv1.JobComplete || cond.Type == batchv1.JobFailed) && cond.Status == corev1.ConditionTrue {
			return true, cond.Type
		}
	}
	return false, ""
}

// trackActive sets status.active to the running Jobs, records the runs
// seen finished since, and the last success.
func (c *Controller) trackActive(cj *batchv1.CronJob, st *batchv1.CronJobStatus, jobs []*batchv1.Job) {
	wasActive := map[string]bool{}
	for _, ref := range cj.Status.Active {
		wasActive[string(ref.UID)] = true
	}
	var active []corev1.ObjectReference
	for _, j := range jobs {
		done, how := jobFinished(j)
		if !done {
			if j.DeletionTimestamp == nil {
				active = append(active, jobRef(j))
			}
			continue
		}
		if wasActive[string(j.UID)] {
			c.recorder.Eventf(cj, corev1.EventTypeNormal, ReasonSawCompletedJob, "Saw completed job: %s, condition: %s", j.Name, how)
		}
		if how == batchv1.JobComplete && j.Status.CompletionTime != nil &&
			(st.LastSuccessfulTime == nil || j.Status.CompletionTime.After(st.LastSuccessfulTime.Time)) {
			t := *j.Status.CompletionTime
			st.LastSuccessfulTime = &t
		}
	}
	sort.Slice(active, func(i, k int) bool { return active[i].Name < active[k].Name })
	st.Active = active
}

// trimHistory deletes the oldest finished Jobs beyond the history
// limits, successful and failed ones counted apart.
func (c *Controller) trimHistory(ctx context.Context, cj *batchv1.CronJob, jobs []*batchv1.Job) error {
	var ok, failed []*batchv1.Job
	for _, j := range jobs {
		if j.DeletionTimestamp != nil {
			continue
		}
		switch _, how := jobFinished(j); how {
		case batchv1.JobComplete:
			ok = append(ok, j)
		case batchv1.JobFailed:
			failed = append(failed, j)
		}
	}
	var errs []error
	for _, h := range []struct {
		jobs  []*batchv1.Job
		limit *int32
	}{{ok, cj.Spec.SuccessfulJobsHistoryLimit}, {failed, cj.Spec.FailedJobsHistoryLimit}} {
		if h.limit == nil || len(h.jobs) <= int(*h.limit) {
			continue
		}
		sort.Slice(h.jobs, func(i, k int) bool { return started(h.jobs[i]).Before(started(h.jobs[k])) })
		for _, j := range h.jobs[:len(h.jobs)-int(*h.limit)] {
			errs = append(errs, c.deleteJob(ctx, cj, j.Name, j.UID))
		}
	}
	return errors.Join(errs...)
}

func started(j *batchv1.Job) time.Time {
	if j.Status.StartTime != nil {
		return j.Status.StartTime.Time
	}
	return j.CreationTimestamp.Time
}

// deleteJob deletes a Job of the CronJob, its pods with it, only if it
// is still the same Job (UID precondition).
func (c *Controller) deleteJob(ctx context.Context, cj *batchv1.CronJob, name string, uid types.UID) error {
	policy := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &policy, Preconditions: &metav1.Preconditions{UID: &uid}}
	err := c.client.BatchV1().Jobs(cj.Namespace).Delete(ctx, name, opts)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonFailedDelete, "Deleted job: %v", err)
		return fmt.Errorf("deleting job %s/%s of cronjob %s: %w", cj.Namespace, name, cj.Name, err)
	}
	c.recorder.Eventf(cj, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted job %s", name)
	return nil
}

// createJob creates the run's Job from the template: its labels and
// annotations, the scheduled time, the CronJob as controller. A Job of
// that name already there and ours is the run, created by an earlier
// pass whose answer was lost.
func (c *Controller) createJob(ctx context.Context, cj *batchv1.CronJob, name string, scheduled time.Time) (*batchv1.Job, error) {
	tmpl := cj.Spec.JobTemplate
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: cj.Namespace,
			Labels:          maps.Clone(tmpl.Labels),
			Annotations:     maps.Clone(tmpl.Annotations),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, GVK)},
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	if j.Annotations == nil {
		j.Annotations = map[string]string{}
	}
	j.Annotations[batchv1.CronJobScheduledTimestampAnnotation] = scheduled.Format(time.RFC3339)
	out, err := c.client.BatchV1().Jobs(cj.Namespace).Create(ctx, j, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		existing, gerr := c.client.BatchV1().Jobs(cj.Namespace).Get(ctx, name, metav1.GetOptions{})
		if gerr == nil {
			if ref := metav1.GetControllerOfNoCopy(existing); ref != nil && ref.UID == cj.UID {
				return existing, nil
			}
		}
		c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating job: a job named %s that this CronJob does not own is in the way", name)
		return nil, fmt.Errorf("creating job %s/%s of cronjob %s: %w", cj.Namespace, name, cj.Name, err)
	}
	if err != nil {
		c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating job: %v", err)
		return nil, fmt.Errorf("creating job %s/%s of cronjob %s: %w", cj.Namespace, name, cj.Name, err)
	}
	c.recorder.Eventf(cj, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Created job %s", out.Name)
	return out, nil
}

func jobRef(j *batchv1.Job) corev1.ObjectReference {
	// No resourceVersion: the reference would change with every update
	// of the Job, and the status with it.
	return corev1.ObjectReference{Kind: "Job", APIVersion: "batch/v1", Namespace: j.Namespace, Name: j.Name, UID: j.UID}
}

func (c *Controller) writeStatus(ctx context.Context, cj *batchv1.CronJob, st *batchv1.CronJobStatus) error {
	if apiequality.Semantic.DeepEqual(&cj.Status, st) {
		return nil
	}
	next := cj.DeepCopy()
	next.Status = *st
	_, err := c.client.BatchV1().CronJobs(cj.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cronjob %s/%s status: %w", cj.Namespace, cj.Name, err)
	}
	return nil
}
