package defaults

import (
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults of Jobs, as Kubernetes'.
const (
	DefaultJobBackoffLimit = int32(6)
	// LabelJobControllerUID ties a Job's pods to it: the selector a Job
	// gets unless it brings its own (manualSelector).
	LabelJobControllerUID = "batch.kubernetes.io/controller-uid"
	LabelJobName          = "batch.kubernetes.io/job-name"
)

func job(j *batchv1.Job) {
	s := &j.Spec
	if s.Completions == nil && s.Parallelism == nil {
		s.Completions, s.Parallelism = ptr(int32(1)), ptr(int32(1))
	}
	if s.Parallelism == nil {
		s.Parallelism = ptr(int32(1))
	}
	if s.BackoffLimit == nil {
		if s.BackoffLimitPerIndex != nil {
			s.BackoffLimit = ptr(int32(1<<31 - 1))
		} else {
			s.BackoffLimit = ptr(DefaultJobBackoffLimit)
		}
	}
	if s.CompletionMode == nil {
		m := batchv1.NonIndexedCompletion
		s.CompletionMode = &m
	}
	if s.Suspend == nil {
		s.Suspend = ptr(false)
	}
	if s.ManualSelector == nil {
		s.ManualSelector = ptr(false)
	}
	if s.PodReplacementPolicy == nil {
		p := batchv1.TerminatingOrFailed
		if s.PodFailurePolicy != nil {
			p = batchv1.Failed
		}
		s.PodReplacementPolicy = &p
	}
	// The selector is generated from the Job's UID, which the apiserver
	// sets before defaulting a create.
	jobSelector(j)
	// A Job's template gets no restartPolicy default: it must say Never
	// or OnFailure (validation says so), as in Kubernetes.
	rp := s.Template.Spec.RestartPolicy
	podTemplate(&s.Template)
	s.Template.Spec.RestartPolicy = rp
}

// Defaults of CronJobs, as Kubernetes'.
const (
	DefaultSuccessfulJobsHistoryLimit = int32(3)
	DefaultFailedJobsHistoryLimit     = int32(1)
)

func cronJob(cj *batchv1.CronJob) {
	s := &cj.Spec
	if s.ConcurrencyPolicy == "" {
		s.ConcurrencyPolicy = batchv1.AllowConcurrent
	}
	if s.Suspend == nil {
		s.Suspend = ptr(false)
	}
	if s.SuccessfulJobsHistoryLimit == nil {
		s.SuccessfulJobsHistoryLimit = ptr(DefaultSuccessfulJobsHistoryLimit)
	}
	if s.FailedJobsHistoryLimit == nil {
		s.FailedJobsHistoryLimit = ptr(DefaultFailedJobsHistoryLimit)
	}
	// The Jobs it creates get the Job defaults then; the pod template's
	// get them now, as Kubernetes does, restartPolicy aside.
	t := &s.JobTemplate.Spec.Template
	rp := t.Spec.RestartPolicy
	podTemplate(t)
	t.Spec.RestartPolicy = rp
}

// jobSelector gives a Job without manualSelector its selector and labels
// its template, from its UID and name, as Kubernetes does on create.
func jobSelector(j *batchv1.Job) {
	if j.Spec.ManualSelector != nil && *j.Spec.ManualSelector {
		return
	}
	if j.UID == "" {
		return
	}
	uid := string(j.UID)
	if j.Spec.Template.Labels == nil {
		j.Spec.Template.Labels = map[string]string{}
	}
	j.Spec.Template.Labels[LabelJobControllerUID] = uid
	j.Spec.Template.Labels[LabelJobName] = j.Name
	// The older names, which kubectl and tools still read.
	j.Spec.Template.Labels["controller-uid"] = uid
	j.Spec.Template.Labels["job-name"] = j.Name
	if j.Spec.Selector == nil {
		j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{LabelJobControllerUID: uid}}
	}
}
