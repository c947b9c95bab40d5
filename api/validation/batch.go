package validation

import (
	"maps"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// maxCronJobNameLength leaves room for the "-<minutes since epoch>" its
// Jobs' names add (11 characters), as Kubernetes does.
const maxCronJobNameLength = 52

// validateCronJob checks a CronJob (old is nil on create): a schedule
// kube-controller-manager's parser reads, without TZ= or CRON_TZ= (the
// zone is spec.timeZone's, which must load), the policies and limits,
// and its Job template as a Job's spec.
func validateCronJob(cj, old *batchv1.CronJob, opts Options) field.ErrorList {
	var errs field.ErrorList
	if old == nil {
		errs = objectMeta(&cj.ObjectMeta, true, nameIsDNSSubdomain)
		if len(cj.Name) > maxCronJobNameLength {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), cj.Name, "must be no more than 52 characters"))
		}
	}
	s := &cj.Spec
	errs = append(errs, ValidateCronSchedule(s.Schedule, specPath.Child("schedule"))...)
	errs = append(errs, validateTimeZone(s.TimeZone, specPath.Child("timeZone"))...)
	policies := []batchv1.ConcurrencyPolicy{batchv1.AllowConcurrent, batchv1.ForbidConcurrent, batchv1.ReplaceConcurrent}
	switch {
	case s.ConcurrencyPolicy == "":
		errs = append(errs, field.Required(specPath.Child("concurrencyPolicy"), ""))
	case !oneOf(s.ConcurrencyPolicy, policies...):
		errs = append(errs, field.NotSupported(specPath.Child("concurrencyPolicy"), s.ConcurrencyPolicy, policies))
	}
	if s.StartingDeadlineSeconds != nil {
		errs = nonNegative(errs, specPath.Child("startingDeadlineSeconds"), *s.StartingDeadlineSeconds)
	}
	for _, c := range []struct {
		name string
		v    *int32
	}{{"successfulJobsHistoryLimit", s.SuccessfulJobsHistoryLimit}, {"failedJobsHistoryLimit", s.FailedJobsHistoryLimit}} {
		if c.v != nil {
			errs = nonNegative(errs, specPath.Child(c.name), int64(*c.v))
		}
	}
	tp := specPath.Child("jobTemplate")
	errs = append(errs, metav1validation.ValidateLabels(s.JobTemplate.Labels, tp.Child("metadata", "labels"))...)
	// Each Job gets its selector from its own UID when it is created;
	// check the template against the one it will have.
	js := s.JobTemplate.Spec.DeepCopy()
	if js.Selector == nil && !(js.ManualSelector != nil && *js.ManualSelector) {
		js.Template.Labels = maps.Clone(js.Template.Labels)
		if js.Template.Labels == nil {
			js.Template.Labels = map[string]string{}
		}
		js.Template.Labels[batchv1.ControllerUidLabel] = "generated"
		js.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{batchv1.ControllerUidLabel: "generated"}}
	}
	// The template of a CronJob may change at any time (only the Jobs
	// created after see it): no old spec to hold it to. Its images are
	// checked as a new Job's would be.
	errs = append(errs, validateJobSpec(cj.Name+"-00000000000", js, nil, tp.Child("spec"), opts)...)
	return errs
}

// ValidateCronSchedule checks a schedule as Kubernetes does: five fields
// or a macro (@hourly, @daily...), read by robfig/cron's standard parser.
func ValidateCronSchedule(schedule string, p *field.Path) field.ErrorList {
	if schedule == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	if strings.Contains(schedule, "TZ") {
		return field.ErrorList{field.Invalid(p, schedule, "cannot use TZ or CRON_TZ in schedule, use timeZone field instead")}
	}
	if _, err := cron.ParseStandard(schedule); err != nil {
		return field.ErrorList{field.Invalid(p, schedule, err.Error())}
	}
	return nil
}

func validateTimeZone(tz *string, p *field.Path) field.ErrorList {
	if tz == nil {
		return nil
	}
	switch {
	case *tz == "":
		return field.ErrorList{field.Invalid(p, *tz, "timeZone must be nil or non-empty string")}
	case strings.EqualFold(*tz, "Local"):
		return field.ErrorList{field.Invalid(p, *tz, "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones")}
	}
	if _, err := time.LoadLocation(*tz); err != nil {
		return field.ErrorList{field.Invalid(p, *tz, err.Error())}
	}
	return nil
}
