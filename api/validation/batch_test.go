package validation

import (
	"strings"
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

func validCronJob(mutate func(*batchv1.CronJob)) *batchv1.CronJob {
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly-export", Namespace: "shop"},
		Spec: batchv1.CronJobSpec{Schedule: "0 2 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure,
				Containers: []corev1.Container{{Name: "export", Image: image}}}}}}}}
	mutate(cj)
	return defaulted(cj)
}

func TestValidateCronJob(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*batchv1.CronJob)
		want   []want
		msg    string
	}{
		{name: "valid", mutate: func(*batchv1.CronJob) {}},
		{name: "macro and zone", mutate: func(cj *batchv1.CronJob) {
			cj.Spec.Schedule, cj.Spec.TimeZone = "@hourly", ptr.To("Europe/Berlin")
		}},
		{name: "bad schedule", mutate: func(cj *batchv1.CronJob) { cj.Spec.Schedule = "61 * * * *" }, want: []want{invalid("spec.schedule")}},
		{name: "six fields", mutate: func(cj *batchv1.CronJob) { cj.Spec.Schedule = "0 0 2 * * *" }, want: []want{invalid("spec.schedule")}},
		{name: "no schedule", mutate: func(cj *batchv1.CronJob) { cj.Spec.Schedule = "" }, want: []want{required("spec.schedule")}},
		{name: "TZ in schedule", mutate: func(cj *batchv1.CronJob) { cj.Spec.Schedule = "TZ=UTC 0 2 * * *" }, want: []want{invalid("spec.schedule")},
			msg: "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"},
		{name: "CRON_TZ in schedule", mutate: func(cj *batchv1.CronJob) { cj.Spec.Schedule = "CRON_TZ=Europe/Berlin 0 2 * * *" }, want: []want{invalid("spec.schedule")}},
		{name: "unknown zone", mutate: func(cj *batchv1.CronJob) { cj.Spec.TimeZone = ptr.To("Mars/Olympus") }, want: []want{invalid("spec.timeZone")},
			msg: "unknown time zone Mars/Olympus"},
		{name: "Local", mutate: func(cj *batchv1.CronJob) { cj.Spec.TimeZone = ptr.To("Local") }, want: []want{invalid("spec.timeZone")}},
		{name: "policy", mutate: func(cj *batchv1.CronJob) { cj.Spec.ConcurrencyPolicy = "Sometimes" }, want: []want{notSupported("spec.concurrencyPolicy")}},
		{name: "negatives", mutate: func(cj *batchv1.CronJob) {
			cj.Spec.StartingDeadlineSeconds, cj.Spec.FailedJobsHistoryLimit = ptr.To(int64(-1)), ptr.To(int32(-1))
		}, want: []want{invalid("spec.startingDeadlineSeconds"), invalid("spec.failedJobsHistoryLimit")}},
		{name: "name too long", mutate: func(cj *batchv1.CronJob) { cj.Name = "a-cronjob-name-longer-than-fifty-two-characters-is-refused" },
			want: []want{invalid("metadata.name")}},
		{name: "template restartPolicy", mutate: func(cj *batchv1.CronJob) {
			cj.Spec.JobTemplate.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
		},
			want: []want{notSupported("spec.jobTemplate.spec.template.spec.restartPolicy")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateCreate(validCronJob(tc.mutate), Options{})
			expectErrors(t, errs, tc.want...)
			if tc.msg != "" && (len(errs) == 0 || !strings.Contains(errs[0].Error(), tc.msg)) {
				t.Errorf("errors %v, want one saying %q", errs, tc.msg)
			}
		})
	}
}
