package job

import (
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func indexed(completions, parallelism int32) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
		j.Spec.Completions, j.Spec.Parallelism = ptr.To(completions), ptr.To(parallelism)
	}
}

// indexes returns the running pods' indexes, in order.
func (b *bench) indexes() string {
	l, _ := b.client.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{})
	var idx []int
	for _, p := range l.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			i, _ := strconv.Atoi(p.Annotations[batchv1.JobCompletionIndexAnnotation])
			idx = append(idx, i)
		}
	}
	sort.Ints(idx)
	var s []string
	for _, i := range idx {
		s = append(s, strconv.Itoa(i))
	}
	return strings.Join(s, ",")
}

// finishIndex ends the running pod of an index with exitCode.
func (b *bench) finishIndex(index int, exitCode int32) {
	b.t.Helper()
	l, _ := b.client.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{})
	for i := range l.Items {
		p := &l.Items[i]
		if p.Annotations[batchv1.JobCompletionIndexAnnotation] != strconv.Itoa(index) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		p.Status.Phase = corev1.PodSucceeded
		if exitCode != 0 {
			p.Status.Phase = corev1.PodFailed
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "export", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, FinishedAt: metav1.NewTime(b.clock.Now())}}}}
		if _, err := b.client.CoreV1().Pods("shop").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			b.t.Fatal(err)
		}
		b.refresh()
		return
	}
	b.t.Fatalf("no running pod of index %d", index)
}

func TestIndexedJobRunsEachIndexOnce(t *testing.T) {
	b := newBench(t, newJob(indexed(5, 2), func(j *batchv1.Job) { j.Spec.Template.Spec.Subdomain = "workers" }))
	b.sync()
	if got := b.indexes(); got != "0,1" {
		t.Fatalf("first pass runs indexes %q, want the lowest two", got)
	}
	l, _ := b.client.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{})
	for _, p := range l.Items {
		idx := p.Annotations[batchv1.JobCompletionIndexAnnotation]
		if p.Labels[batchv1.JobCompletionIndexAnnotation] != idx || p.Spec.Hostname != "export-"+idx || p.Spec.Subdomain != "workers" ||
			!strings.HasPrefix(p.Name, "export-"+idx+"-") {
			t.Errorf("pod %s: labels %v, hostname %q, subdomain %q", p.Name, p.Labels, p.Spec.Hostname, p.Spec.Subdomain)
		}
		env := p.Spec.Containers[0].Env
		if len(env) != 1 || env[0].Name != EnvCompletionIndex || env[0].ValueFrom == nil ||
			env[0].ValueFrom.FieldRef.FieldPath != "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
			t.Errorf("pod %s env: %+v", p.Name, env)
		}
	}
	b.finishIndex(1, 0)
	b.sync()
	if got, j := b.indexes(), b.job(); got != "0,2" || j.Status.CompletedIndexes != "1" || j.Status.Succeeded != 1 {
		t.Fatalf("after index 1 succeeded: running %q, completedIndexes %q, succeeded %d", got, j.Status.CompletedIndexes, j.Status.Succeeded)
	}
	b.finishIndex(0, 0)
	b.finishIndex(2, 3)
	b.sync()
	// The failure holds every new pod back (no backoffLimitPerIndex).
	if got, j := b.indexes(), b.job(); got != "" || j.Status.CompletedIndexes != "0,1" || j.Status.Failed != 1 {
		t.Fatalf("right after index 2 failed: running %q, completedIndexes %q, failed %d", got, j.Status.CompletedIndexes, j.Status.Failed)
	}
	b.clock.Step(11 * time.Second)
	b.sync()
	if got := b.indexes(); got != "2,3" {
		t.Fatalf("after the backoff: running %q, want index 2 again and 3", got)
	}
	b.finishIndex(2, 0)
	b.finishIndex(3, 0)
	b.sync()
	b.finishIndex(4, 0)
	b.sync()
	j := b.job()
	if !hasCondition(j, batchv1.JobComplete, "") || j.Status.CompletedIndexes != "0-4" || j.Status.Succeeded != 5 || j.Status.Active != 0 {
		t.Errorf("after every index: %+v", j.Status)
	}
}

func TestIndexedJobBackoffLimitPerIndex(t *testing.T) {
	b := newBench(t, newJob(indexed(4, 4), func(j *batchv1.Job) {
		j.Spec.BackoffLimitPerIndex, j.Spec.MaxFailedIndexes = ptr.To(int32(1)), ptr.To(int32(1))
		j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
			{Action: batchv1.PodFailurePolicyActionFailIndex, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}},
		}}
	}))
	b.sync()
	b.finishIndex(0, 1)  // one failure: retried after its own backoff
	b.finishIndex(1, 42) // FailIndex: failed at once
	b.finishIndex(2, 0)
	b.sync()
	j := b.job()
	if got := b.indexes(); got != "3" || ptr.Deref(j.Status.FailedIndexes, "") != "1" || j.Status.CompletedIndexes != "2" || j.Status.Failed != 2 {
		t.Fatalf("after the first failures: running %q, status %+v", got, j.Status)
	}
	b.clock.Step(11 * time.Second)
	b.sync()
	if got := b.indexes(); got != "0,3" {
		t.Fatalf("after index 0's backoff: running %q", got)
	}
	l, _ := b.client.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{})
	for _, p := range l.Items {
		if p.Annotations[batchv1.JobCompletionIndexAnnotation] == "0" && p.Status.Phase == "" && p.Annotations[AnnotationIndexFailureCount] != "1" {
			t.Errorf("index 0's second pod: annotations %v, want failure count 1", p.Annotations)
		}
	}
	b.finishIndex(0, 1) // index 0 past its limit: two failed indexes > maxFailedIndexes 1
	b.sync()
	j = b.job()
	if !hasCondition(j, batchv1.JobFailed, ReasonMaxFailedIndexesExceeded) || ptr.Deref(j.Status.FailedIndexes, "") != "0,1" || b.indexes() != "" {
		t.Errorf("past maxFailedIndexes: running %q, status %+v", b.indexes(), j.Status)
	}
}

func TestIndexedJobFailsWithFailedIndexesAtTheEnd(t *testing.T) {
	b := newBench(t, newJob(indexed(3, 3), func(j *batchv1.Job) { j.Spec.BackoffLimitPerIndex = ptr.To(int32(0)) }))
	b.sync()
	b.finishIndex(1, 1)
	b.sync()
	// The other indexes go on.
	if got, j := b.indexes(), b.job(); got != "0,2" || finishedJob(j) {
		t.Fatalf("after index 1 failed: running %q, status %+v", got, j.Status)
	}
	b.finishIndex(0, 0)
	b.finishIndex(2, 0)
	b.sync()
	j := b.job()
	if !hasCondition(j, batchv1.JobFailed, ReasonFailedIndexes) || j.Status.CompletedIndexes != "0,2" || ptr.Deref(j.Status.FailedIndexes, "") != "1" {
		t.Errorf("at the end: %+v", j.Status)
	}
}

func finishedJob(j *batchv1.Job) bool { done, _ := finished(&j.Status); return done }

func TestIndexSetString(t *testing.T) {
	for in, want := range map[string]string{"": "", "1": "1", "1,2": "1,2", "1,3,4,5,7": "1,3-5,7", "0-2,3,8-9": "0-3,8,9", "9-10": "9", "5-7,30": "5-7"} {
		s, err := parseIndexes(in, 10)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.String(); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
	if _, err := parseIndexes("1,x", 10); err == nil {
		t.Error("an unreadable index set was accepted")
	}
}
