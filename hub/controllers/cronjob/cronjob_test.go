package cronjob

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api/defaults"
)

var (
	ctx = context.Background()
	t0  = time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
)

type bench struct {
	t       *testing.T
	client  *fake.Clientset
	factory informers.SharedInformerFactory
	c       *Controller
	rec     *record.FakeRecorder
	clock   *clocktesting.FakeClock
	requeue time.Duration
}

func newBench(t *testing.T, cj *batchv1.CronJob) *bench {
	t.Helper()
	defaults.Default(cj)
	client := fake.NewClientset(cj)
	clk := clocktesting.NewFakeClock(t0)
	client.PrependReactor("create", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		j := a.(k8stesting.CreateAction).GetObject().(*batchv1.Job)
		j.UID = types.UID("uid-" + j.Name)
		j.CreationTimestamp = metav1.NewTime(clk.Now())
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	rec := record.NewFakeRecorder(1000)
	c, err := New(client, factory, rec, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{t: t, client: client, factory: factory, c: c, rec: rec, clock: clk, requeue: -1}
	c.requeue = func(_ string, d time.Duration) { b.requeue = d }
	return b
}

func (b *bench) refresh() {
	b.t.Helper()
	cjs, _ := b.client.BatchV1().CronJobs("").List(ctx, metav1.ListOptions{})
	jobs, _ := b.client.BatchV1().Jobs("").List(ctx, metav1.ListOptions{})
	var a, j []any
	for i := range cjs.Items {
		a = append(a, &cjs.Items[i])
	}
	for i := range jobs.Items {
		j = append(j, &jobs.Items[i])
	}
	if err := b.factory.Batch().V1().CronJobs().Informer().GetIndexer().Replace(a, ""); err != nil {
		b.t.Fatal(err)
	}
	if err := b.factory.Batch().V1().Jobs().Informer().GetIndexer().Replace(j, ""); err != nil {
		b.t.Fatal(err)
	}
}

// sync runs one pass at the clock's time and returns the events it
// recorded.
func (b *bench) sync() []string {
	b.t.Helper()
	b.refresh()
	b.requeue = -1
	if err := b.c.sync(ctx, "shop/nightly"); err != nil {
		b.t.Fatal(err)
	}
	var evs []string
	for {
		select {
		case e := <-b.rec.Events:
			evs = append(evs, e)
		default:
			return evs
		}
	}
}

func (b *bench) cronJob() *batchv1.CronJob {
	cj, err := b.client.BatchV1().CronJobs("shop").Get(ctx, "nightly", metav1.GetOptions{})
	if err != nil {
		b.t.Fatal(err)
	}
	return cj
}

// jobs returns the Jobs' names, sorted.
func (b *bench) jobs() []string {
	l, _ := b.client.BatchV1().Jobs("shop").List(ctx, metav1.ListOptions{})
	var out []string
	for _, j := range l.Items {
		out = append(out, j.Name)
	}
	sort.Strings(out)
	return out
}

// finish ends a Job, Complete or Failed, now.
func (b *bench) finish(name string, how batchv1.JobConditionType) {
	b.t.Helper()
	j, err := b.client.BatchV1().Jobs("shop").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		b.t.Fatal(err)
	}
	now := metav1.NewTime(b.clock.Now())
	j.Status.StartTime = &j.CreationTimestamp
	j.Status.Conditions = []batchv1.JobCondition{{Type: how, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	if how == batchv1.JobComplete {
		j.Status.CompletionTime = &now
	}
	if _, err := b.client.BatchV1().Jobs("shop").UpdateStatus(ctx, j, metav1.UpdateOptions{}); err != nil {
		b.t.Fatal(err)
	}
}

func newCronJob(schedule string, mods ...func(*batchv1.CronJob)) *batchv1.CronJob {
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "shop", UID: "cj-uid", CreationTimestamp: metav1.NewTime(t0)},
		Spec: batchv1.CronJobSpec{Schedule: schedule, TimeZone: ptr.To("UTC"), JobTemplate: batchv1.JobTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "export"}},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "export", Image: "registry.local/export@sha256:1"}}}}}}}}
	for _, m := range mods {
		m(cj)
	}
	return cj
}

func hasEvent(evs []string, reason string) bool {
	for _, e := range evs {
		if strings.Contains(e, " "+reason+" ") {
			return true
		}
	}
	return false
}

func TestCronJobFiresOnSchedule(t *testing.T) {
	b := newBench(t, newCronJob("*/5 * * * *"))
	b.clock.SetTime(t0.Add(time.Minute))
	b.sync()
	if len(b.jobs()) != 0 || b.requeue != 4*time.Minute+nextDelta {
		t.Fatalf("before the first run: jobs %v, requeue in %v, want none and 4m", b.jobs(), b.requeue)
	}
	b.clock.SetTime(t0.Add(5 * time.Minute))
	evs := b.sync()
	name := "nightly-" + "29934845" // 2026-12-01T02:05Z in minutes since the epoch
	if got := b.jobs(); len(got) != 1 || got[0] != name || !hasEvent(evs, ReasonSuccessfulCreate) {
		t.Fatalf("at 02:05: jobs %v, events %v, want %s created", got, evs, name)
	}
	j, _ := b.client.BatchV1().Jobs("shop").Get(ctx, name, metav1.GetOptions{})
	if j.Annotations[batchv1.CronJobScheduledTimestampAnnotation] != "2026-12-01T02:05:00Z" || j.Labels["app"] != "export" ||
		metav1.GetControllerOf(j) == nil || metav1.GetControllerOf(j).UID != "cj-uid" {
		t.Errorf("the job: annotations %v, labels %v, owners %v", j.Annotations, j.Labels, j.OwnerReferences)
	}
	cj := b.cronJob()
	if len(cj.Status.Active) != 1 || cj.Status.Active[0].Name != name || !cj.Status.LastScheduleTime.Time.Equal(t0.Add(5*time.Minute)) {
		t.Errorf("status after the run: %+v", cj.Status)
	}
	if b.requeue != 5*time.Minute+nextDelta {
		t.Errorf("requeue in %v, want the next run's 5m", b.requeue)
	}
	// A pass again at once starts nothing more.
	b.sync()
	if len(b.jobs()) != 1 {
		t.Fatalf("a second pass at the same time: jobs %v", b.jobs())
	}
	b.clock.Step(2 * time.Minute)
	b.finish(name, batchv1.JobComplete)
	evs = b.sync()
	cj = b.cronJob()
	if len(cj.Status.Active) != 0 || cj.Status.LastSuccessfulTime == nil || !hasEvent(evs, ReasonSawCompletedJob) {
		t.Errorf("after the run completed: status %+v, events %v", cj.Status, evs)
	}
}

func TestCronJobTimeZoneAndMacros(t *testing.T) {
	// 02:00 in Tokyo (UTC+9, no summer time) is 17:00 UTC the day before.
	b := newBench(t, newCronJob("0 2 * * *", func(cj *batchv1.CronJob) { cj.Spec.TimeZone = ptr.To("Asia/Tokyo") }))
	b.sync()
	if want := 15*time.Hour + nextDelta; b.requeue != want {
		t.Fatalf("created at 02:00 UTC: requeue in %v, want %v (17:00 UTC)", b.requeue, want)
	}
	b.clock.SetTime(time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC))
	b.sync()
	l, _ := b.client.BatchV1().Jobs("shop").List(ctx, metav1.ListOptions{})
	if len(l.Items) != 1 || l.Items[0].Annotations[batchv1.CronJobScheduledTimestampAnnotation] != "2026-12-02T02:00:00+09:00" {
		t.Fatalf("at 17:00 UTC: %d jobs, %v", len(l.Items), l.Items)
	}

	h := newBench(t, newCronJob("@hourly"))
	h.clock.SetTime(t0.Add(59 * time.Minute))
	h.sync()
	if len(h.jobs()) != 0 || h.requeue != time.Minute+nextDelta {
		t.Fatalf("@hourly at 02:59: jobs %v, requeue %v", h.jobs(), h.requeue)
	}
	h.clock.SetTime(t0.Add(time.Hour))
	h.sync()
	if got := h.jobs(); len(got) != 1 {
		t.Errorf("@hourly at 03:00: jobs %v", got)
	}
}

func TestCronJobConcurrencyPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy batchv1.ConcurrencyPolicy
		// jobs after the second run is due while the first is active
		want  string
		event string
	}{
		{batchv1.AllowConcurrent, "nightly-29934841 nightly-29934842", ReasonSuccessfulCreate},
		{batchv1.ForbidConcurrent, "nightly-29934841", ReasonJobAlreadyActive},
		{batchv1.ReplaceConcurrent, "nightly-29934842", ReasonSuccessfulDelete},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			b := newBench(t, newCronJob("* * * * *", func(cj *batchv1.CronJob) { cj.Spec.ConcurrencyPolicy = tc.policy }))
			b.clock.SetTime(t0.Add(time.Minute))
			b.sync()
			b.clock.SetTime(t0.Add(2 * time.Minute))
			evs := b.sync()
			if got := strings.Join(b.jobs(), " "); got != tc.want || !hasEvent(evs, tc.event) {
				t.Fatalf("jobs %q, events %v; want %q and a %s event", got, evs, tc.want, tc.event)
			}
			if tc.policy != batchv1.ForbidConcurrent {
				return
			}
			// The active run ends within the minute: the skipped run
			// starts then.
			b.clock.SetTime(t0.Add(2*time.Minute + 30*time.Second))
			b.finish("nightly-29934841", batchv1.JobComplete)
			b.sync()
			if got := strings.Join(b.jobs(), " "); got != "nightly-29934841 nightly-29934842" {
				t.Errorf("after the active run ended: jobs %q", got)
			}
		})
	}
}

func TestCronJobStartingDeadlineAndMissedRuns(t *testing.T) {
	b := newBench(t, newCronJob("*/5 * * * *", func(cj *batchv1.CronJob) { cj.Spec.StartingDeadlineSeconds = ptr.To(int64(60)) }))
	// The hub was down from 02:04 to 02:07: the 02:05 run is 2 min late.
	b.clock.SetTime(t0.Add(7 * time.Minute))
	evs := b.sync()
	if len(b.jobs()) != 0 || !hasEvent(evs, ReasonMissSchedule) || b.requeue != 3*time.Minute+nextDelta {
		t.Fatalf("2 min past a run with a 60 s deadline: jobs %v, events %v, requeue %v", b.jobs(), evs, b.requeue)
	}
	b.clock.SetTime(t0.Add(10*time.Minute + 30*time.Second))
	b.sync()
	if got := b.jobs(); len(got) != 1 || got[0] != "nightly-29934850" {
		t.Errorf("30 s after the 02:10 run: jobs %v", got)
	}

	// No deadline, 200 runs missed: a warning, and only the latest starts.
	m := newBench(t, newCronJob("* * * * *"))
	m.clock.SetTime(t0.Add(200*time.Minute + 10*time.Second))
	evs = m.sync()
	if got := m.jobs(); len(got) != 1 || got[0] != "nightly-29935040" || !hasEvent(evs, ReasonTooManyMissedTimes) {
		t.Errorf("200 minutes missed: jobs %v, events %v", got, evs)
	}
}

func TestCronJobSuspendAndHistoryLimits(t *testing.T) {
	b := newBench(t, newCronJob("* * * * *", func(cj *batchv1.CronJob) {
		cj.Spec.SuccessfulJobsHistoryLimit, cj.Spec.FailedJobsHistoryLimit = ptr.To(int32(1)), ptr.To(int32(1))
	}))
	for i, how := range []batchv1.JobConditionType{batchv1.JobComplete, batchv1.JobFailed, batchv1.JobComplete, batchv1.JobFailed} {
		b.clock.SetTime(t0.Add(time.Duration(i+1) * time.Minute))
		b.sync()
		b.finish(JobName(b.cronJob(), t0.Add(time.Duration(i+1)*time.Minute)), how)
	}
	b.clock.SetTime(t0.Add(4*time.Minute + 30*time.Second))
	b.sync()
	// The oldest success and failure go; the newest of each stays.
	if got := strings.Join(b.jobs(), " "); got != "nightly-29934843 nightly-29934844" {
		t.Fatalf("history: %q", got)
	}
	cj := b.cronJob()
	cj.Spec.Suspend = ptr.To(true)
	if _, err := b.client.BatchV1().CronJobs("shop").Update(ctx, cj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.clock.SetTime(t0.Add(10 * time.Minute))
	b.sync()
	if got := strings.Join(b.jobs(), " "); got != "nightly-29934843 nightly-29934844" || b.requeue != -1 {
		t.Errorf("suspended: jobs %q, requeue %v (want none: resuming wakes it)", got, b.requeue)
	}
}

func TestLatestBeforeMatchesAWalk(t *testing.T) {
	for _, spec := range []string{"* * * * *", "*/7 3-5 * * 1-5", "0 0 29 2 *", "@weekly"} {
		sched, err := cron.ParseStandard(spec)
		if err != nil {
			t.Fatal(err)
		}
		from := sched.Next(t0)
		now := t0.Add(400 * 24 * time.Hour)
		want := from
		for next := sched.Next(from); !next.After(now); next = sched.Next(next) {
			want = next
		}
		if got := latestBefore(sched, from, now); !got.Equal(want) {
			t.Errorf("%s: %v, want %v", spec, got, want)
		}
	}
}
