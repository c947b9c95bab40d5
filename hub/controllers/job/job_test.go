package job

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
}

func newBench(t *testing.T, j *batchv1.Job) *bench {
	t.Helper()
	defaults.Default(j)
	client := fake.NewClientset(j)
	var n atomic.Int64
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		i := n.Add(1)
		p.Name = fmt.Sprintf("%s%03d", p.GenerateName, i)
		p.UID = types.UID(fmt.Sprintf("pod-%d", i))
		p.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration(i) * time.Second))
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	rec := record.NewFakeRecorder(1000)
	clk := clocktesting.NewFakeClock(t0)
	c, err := New(client, factory, rec, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return &bench{t: t, client: client, factory: factory, c: c, rec: rec, clock: clk}
}

func (b *bench) refresh() {
	b.t.Helper()
	jobs, _ := b.client.BatchV1().Jobs("").List(ctx, metav1.ListOptions{})
	pods, _ := b.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	var a, p []any
	for i := range jobs.Items {
		a = append(a, &jobs.Items[i])
	}
	for i := range pods.Items {
		p = append(p, &pods.Items[i])
	}
	if err := b.factory.Batch().V1().Jobs().Informer().GetIndexer().Replace(a, ""); err != nil {
		b.t.Fatal(err)
	}
	if err := b.factory.Core().V1().Pods().Informer().GetIndexer().Replace(p, ""); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bench) sync() {
	b.t.Helper()
	b.refresh()
	b.c.exp.Delete("shop/export")
	if err := b.c.sync(ctx, "shop/export"); err != nil {
		b.t.Fatal(err)
	}
	b.refresh()
}

func (b *bench) job() *batchv1.Job {
	j, err := b.client.BatchV1().Jobs("shop").Get(ctx, "export", metav1.GetOptions{})
	if err != nil {
		b.t.Fatal(err)
	}
	return j
}

// pods returns the pods' phases, oldest first.
func (b *bench) pods() []string {
	l, _ := b.client.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{})
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
	var out []string
	for _, p := range l.Items {
		ph := string(p.Status.Phase)
		if ph == "" {
			ph = "Pending"
		}
		out = append(out, ph)
	}
	return out
}

// finish ends the running pods: the first ok ones succeed, the rest fail
// with exitCode.
func (b *bench) finish(ok int, exitCode int32) {
	b.t.Helper()
	l, _ := b.client.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{})
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
	for i := range l.Items {
		p := &l.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		code := int32(0)
		p.Status.Phase = corev1.PodSucceeded
		if ok <= 0 {
			p.Status.Phase, code = corev1.PodFailed, exitCode
		}
		ok--
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "export", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: metav1.NewTime(b.clock.Now())}}}}
		if _, err := b.client.CoreV1().Pods("shop").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			b.t.Fatal(err)
		}
	}
	b.refresh()
}

func newJob(mods ...func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "export", Namespace: "shop", UID: "job-uid"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "export", Image: "registry.local/export@sha256:1"}}}}}}
	for _, m := range mods {
		m(j)
	}
	return j
}

func hasCondition(j *batchv1.Job, t batchv1.JobConditionType, reason string) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue && (reason == "" || c.Reason == reason) {
			return true
		}
	}
	return false
}

func TestJobRunsToCompletion(t *testing.T) {
	b := newBench(t, newJob(func(j *batchv1.Job) { j.Spec.Completions, j.Spec.Parallelism = ptr.To(int32(3)), ptr.To(int32(2)) }))
	b.sync()
	if got := strings.Join(b.pods(), " "); got != "Pending Pending" {
		t.Fatalf("first pass: %s, want parallelism 2", got)
	}
	j := b.job()
	if j.Status.Active != 2 || j.Status.StartTime == nil {
		t.Errorf("status after the first pass: %+v", j.Status)
	}
	b.finish(2, 0)
	b.sync()
	if got := strings.Join(b.pods(), " "); got != "Succeeded Succeeded Pending" {
		t.Fatalf("after two successes: %s, want one more pod for the third completion", got)
	}
	b.finish(1, 0)
	b.sync()
	j = b.job()
	if !hasCondition(j, batchv1.JobComplete, "") || j.Status.Succeeded != 3 || j.Status.CompletionTime == nil || j.Status.Active != 0 {
		t.Errorf("after three successes: %+v", j.Status)
	}
}

func TestJobBackoffAndLimit(t *testing.T) {
	b := newBench(t, newJob(func(j *batchv1.Job) { j.Spec.BackoffLimit = ptr.To(int32(1)) }))
	b.sync()
	b.finish(0, 2)
	b.sync()
	if got := strings.Join(b.pods(), " "); got != "Failed" {
		t.Fatalf("right after the first failure: %s, want the replacement to wait 10s", got)
	}
	b.clock.Step(11 * time.Second)
	b.sync()
	if got := strings.Join(b.pods(), " "); got != "Failed Pending" {
		t.Fatalf("after the backoff: %s", got)
	}
	b.finish(0, 2)
	b.clock.Step(time.Minute)
	b.sync()
	j := b.job()
	if !hasCondition(j, batchv1.JobFailed, ReasonBackoffLimitExceeded) || j.Status.Failed != 2 {
		t.Errorf("after two failures with backoffLimit 1: %+v", j.Status)
	}
	if got := strings.Join(b.pods(), " "); got != "Failed Failed" {
		t.Errorf("pods after the job failed: %s (failed pods are kept, no new one)", got)
	}
}

func TestJobDeadlineSuspendAndTTL(t *testing.T) {
	b := newBench(t, newJob(func(j *batchv1.Job) {
		j.Spec.ActiveDeadlineSeconds = ptr.To(int64(60))
		j.Spec.TTLSecondsAfterFinished = ptr.To(int32(30))
	}))
	b.sync()
	// Suspended: the running pod goes, the clock stops.
	j := b.job()
	j.Spec.Suspend = ptr.To(true)
	if _, err := b.client.BatchV1().Jobs("shop").Update(ctx, j, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.sync()
	if j := b.job(); !hasCondition(j, batchv1.JobSuspended, "") || j.Status.StartTime != nil || len(b.pods()) != 0 {
		t.Fatalf("suspended: %+v, pods %v", j.Status, b.pods())
	}
	b.clock.Step(10 * time.Minute)
	j = b.job()
	j.Spec.Suspend = ptr.To(false)
	if _, err := b.client.BatchV1().Jobs("shop").Update(ctx, j, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.sync()
	if j := b.job(); hasCondition(j, batchv1.JobSuspended, "") || len(b.pods()) != 1 {
		t.Fatalf("resumed: %+v, pods %v", j.Status, b.pods())
	}
	// Past the deadline (counted from the resume): failed, pod stopped.
	b.clock.Step(61 * time.Second)
	b.sync()
	if j := b.job(); !hasCondition(j, batchv1.JobFailed, ReasonDeadlineExceeded) || len(b.pods()) != 0 {
		t.Fatalf("past the deadline: %+v, pods %v", j.Status, b.pods())
	}
	// 30 s after it finished, the Job is deleted.
	b.clock.Step(31 * time.Second)
	b.sync()
	if _, err := b.client.BatchV1().Jobs("shop").Get(ctx, "export", metav1.GetOptions{}); err == nil {
		t.Error("the finished job outlived its ttlSecondsAfterFinished")
	}
}

func TestJobPodFailurePolicy(t *testing.T) {
	b := newBench(t, newJob(func(j *batchv1.Job) {
		j.Spec.Parallelism, j.Spec.Completions = ptr.To(int32(1)), ptr.To(int32(1))
		j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
			{Action: batchv1.PodFailurePolicyActionIgnore, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{75}}},
			{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}},
		}}
	}))
	b.sync()
	b.finish(0, 75) // ignored: replaced at once, not counted
	b.sync()
	if j := b.job(); j.Status.Failed != 0 || strings.Join(b.pods(), " ") != "Failed Pending" {
		t.Fatalf("after an ignored failure: failed %d, pods %v", j.Status.Failed, b.pods())
	}
	b.finish(0, 42) // fails the job
	b.sync()
	if j := b.job(); !hasCondition(j, batchv1.JobFailed, ReasonPodFailurePolicy) {
		t.Errorf("after exit code 42: %+v", j.Status)
	}
}
