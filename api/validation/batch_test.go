package validation

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func validJob(mutate func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "export", Namespace: "shop", UID: "job-uid"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "export", Image: image}}}}}}
	mutate(j)
	return defaulted(j)
}

func TestValidateIndexedJob(t *testing.T) {
	idx := func(j *batchv1.Job) {
		j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
		j.Spec.Completions = ptr.To(int32(10))
	}
	failIndex := &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionFailIndex,
		OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}}}}
	cases := []struct {
		name   string
		mutate func(*batchv1.Job)
		want   []want
	}{
		{name: "indexed", mutate: idx},
		{name: "per index", mutate: func(j *batchv1.Job) {
			idx(j)
			j.Spec.BackoffLimitPerIndex, j.Spec.MaxFailedIndexes, j.Spec.PodFailurePolicy = ptr.To(int32(2)), ptr.To(int32(3)), failIndex
		}},
		{name: "no completions", mutate: func(j *batchv1.Job) {
			j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
			j.Spec.Parallelism = ptr.To(int32(2))
		}, want: []want{required("spec.completions")}},
		{name: "parallelism", mutate: func(j *batchv1.Job) { idx(j); j.Spec.Parallelism = ptr.To(int32(100001)) }, want: []want{invalid("spec.parallelism")}},
		{name: "maxFailedIndexes over completions", mutate: func(j *batchv1.Job) {
			idx(j)
			j.Spec.BackoffLimitPerIndex, j.Spec.MaxFailedIndexes = ptr.To(int32(1)), ptr.To(int32(11))
		}, want: []want{invalid("spec.maxFailedIndexes")}},
		{name: "maxFailedIndexes alone", mutate: func(j *batchv1.Job) { idx(j); j.Spec.MaxFailedIndexes = ptr.To(int32(1)) },
			want: []want{required("spec.backoffLimitPerIndex")}},
		{name: "per index on NonIndexed", mutate: func(j *batchv1.Job) { j.Spec.BackoffLimitPerIndex = ptr.To(int32(1)) },
			want: []want{invalid("spec.backoffLimitPerIndex")}},
		{name: "per index with OnFailure", mutate: func(j *batchv1.Job) {
			idx(j)
			j.Spec.BackoffLimitPerIndex = ptr.To(int32(1))
			j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		}, want: []want{notSupported("spec.template.spec.restartPolicy")}},
		{name: "FailIndex without per index", mutate: func(j *batchv1.Job) { idx(j); j.Spec.PodFailurePolicy = failIndex },
			want: []want{invalid("spec.podFailurePolicy.rules[0].action")}},
		{name: "hostname too long", mutate: func(j *batchv1.Job) {
			idx(j)
			j.Name = "a-job-whose-name-is-so-long-that-its-index-does-not-fit-in-63ch"
		}, want: []want{invalid("metadata.name")}},
		{name: "successPolicy", mutate: func(j *batchv1.Job) {
			idx(j)
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededCount: ptr.To(int32(1))}}}
		}, want: []want{forbidden("spec.successPolicy")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			expectErrors(t, ValidateCreate(validJob(tc.mutate), Options{}), tc.want...)
		})
	}
}
