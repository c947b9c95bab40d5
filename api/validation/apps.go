package validation

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var specPath = field.NewPath("spec")

// validateWorkload checks what Deployments, ReplicaSets and DaemonSets
// share: the metadata, a selector that selects the template's pods, the
// template itself, and (on update, old != nil) a selector that never
// changes, since changing it would orphan the running pods.
func validateWorkload(m *metav1.ObjectMeta, sel, oldSel *metav1.LabelSelector, t, oldT *corev1.PodTemplateSpec, kind string, opts Options) field.ErrorList {
	var errs field.ErrorList
	if oldT == nil {
		errs = objectMeta(m, true, nameIsDNSSubdomain)
	}
	sp := specPath.Child("selector")
	if sel == nil {
		errs = append(errs, field.Required(sp, ""))
	} else {
		errs = append(errs, metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, sp)...)
		if len(sel.MatchLabels)+len(sel.MatchExpressions) == 0 {
			errs = append(errs, field.Invalid(sp, sel, "empty selector is invalid for "+kind))
		} else if s, err := metav1.LabelSelectorAsSelector(sel); err == nil && !s.Matches(labels.Set(t.Labels)) {
			errs = append(errs, field.Invalid(specPath.Child("template", "metadata", "labels"), t.Labels, "`selector` does not match template `labels`"))
		}
	}
	if oldT != nil {
		errs = immutable(errs, sp, sel, oldSel)
	}
	return append(errs, validatePodTemplate(t, oldT, specPath.Child("template"), opts)...)
}

func validateDeployment(d, old *appsv1.Deployment, opts Options) field.ErrorList {
	var oldSel *metav1.LabelSelector
	var oldT *corev1.PodTemplateSpec
	if old != nil {
		oldSel, oldT = old.Spec.Selector, &old.Spec.Template
	}
	s := &d.Spec
	errs := validateWorkload(&d.ObjectMeta, s.Selector, oldSel, &s.Template, oldT, "deployment", opts)
	if s.Replicas != nil {
		errs = nonNegative(errs, specPath.Child("replicas"), int64(*s.Replicas))
	}
	errs = nonNegative(errs, specPath.Child("minReadySeconds"), int64(s.MinReadySeconds))
	if s.RevisionHistoryLimit != nil {
		errs = nonNegative(errs, specPath.Child("revisionHistoryLimit"), int64(*s.RevisionHistoryLimit))
	}
	if pd := s.ProgressDeadlineSeconds; pd != nil {
		pp := specPath.Child("progressDeadlineSeconds")
		errs = nonNegative(errs, pp, int64(*pd))
		if *pd <= s.MinReadySeconds {
			errs = append(errs, field.Invalid(pp, *pd, "must be greater than minReadySeconds"))
		}
	}
	stp := specPath.Child("strategy")
	switch s.Strategy.Type {
	case appsv1.RecreateDeploymentStrategyType:
		if s.Strategy.RollingUpdate != nil {
			errs = append(errs, field.Forbidden(stp.Child("rollingUpdate"), "may not be specified when strategy `type` is 'Recreate'"))
		}
	case appsv1.RollingUpdateDeploymentStrategyType:
		if ru := s.Strategy.RollingUpdate; ru == nil {
			errs = append(errs, field.Required(stp.Child("rollingUpdate"), "this should be defaulted and never be nil"))
		} else {
			errs = append(errs, validateRollingUpdate(ru.MaxUnavailable, ru.MaxSurge, stp.Child("rollingUpdate"))...)
		}
	case "":
		errs = append(errs, field.Required(stp.Child("type"), ""))
	default:
		errs = append(errs, field.NotSupported(stp.Child("type"), s.Strategy.Type,
			[]appsv1.DeploymentStrategyType{appsv1.RecreateDeploymentStrategyType, appsv1.RollingUpdateDeploymentStrategyType}))
	}
	return errs
}

func validateReplicaSet(rs, old *appsv1.ReplicaSet, opts Options) field.ErrorList {
	var oldSel *metav1.LabelSelector
	var oldT *corev1.PodTemplateSpec
	if old != nil {
		oldSel, oldT = old.Spec.Selector, &old.Spec.Template
	}
	s := &rs.Spec
	errs := validateWorkload(&rs.ObjectMeta, s.Selector, oldSel, &s.Template, oldT, "replicaset", opts)
	if s.Replicas != nil {
		errs = nonNegative(errs, specPath.Child("replicas"), int64(*s.Replicas))
	}
	return nonNegative(errs, specPath.Child("minReadySeconds"), int64(s.MinReadySeconds))
}

func validateDaemonSet(ds, old *appsv1.DaemonSet, opts Options) field.ErrorList {
	var oldSel *metav1.LabelSelector
	var oldT *corev1.PodTemplateSpec
	if old != nil {
		oldSel, oldT = old.Spec.Selector, &old.Spec.Template
	}
	s := &ds.Spec
	errs := validateWorkload(&ds.ObjectMeta, s.Selector, oldSel, &s.Template, oldT, "daemonset", opts)
	errs = nonNegative(errs, specPath.Child("minReadySeconds"), int64(s.MinReadySeconds))
	if s.RevisionHistoryLimit != nil {
		errs = nonNegative(errs, specPath.Child("revisionHistoryLimit"), int64(*s.RevisionHistoryLimit))
	}
	up := specPath.Child("updateStrategy")
	switch s.UpdateStrategy.Type {
	case appsv1.OnDeleteDaemonSetStrategyType:
	case appsv1.RollingUpdateDaemonSetStrategyType:
		if ru := s.UpdateStrategy.RollingUpdate; ru == nil {
			errs = append(errs, field.Required(up.Child("rollingUpdate"), ""))
		} else {
			errs = append(errs, validateRollingUpdate(ru.MaxUnavailable, ru.MaxSurge, up.Child("rollingUpdate"))...)
		}
	case "":
		errs = append(errs, field.Required(up.Child("type"), ""))
	default:
		errs = append(errs, field.NotSupported(up.Child("type"), s.UpdateStrategy.Type,
			[]appsv1.DaemonSetUpdateStrategyType{appsv1.OnDeleteDaemonSetStrategyType, appsv1.RollingUpdateDaemonSetStrategyType}))
	}
	return errs
}

// validateRollingUpdate: a rollout must be able to make progress, so
// maxUnavailable and maxSurge may not both be zero.
func validateRollingUpdate(maxUnavailable, maxSurge *intstr.IntOrString, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	up, sp := path.Child("maxUnavailable"), path.Child("maxSurge")
	errs = append(errs, validateIntOrPercent(maxUnavailable, up)...)
	errs = append(errs, validateIntOrPercent(maxSurge, sp)...)
	if u, ok := percentOrInt(maxUnavailable); ok && maxUnavailable.Type == intstr.String && u > 100 {
		errs = append(errs, field.Invalid(up, maxUnavailable.StrVal, "must not be greater than 100%"))
	}
	u, uok := percentOrInt(maxUnavailable)
	s, sok := percentOrInt(maxSurge)
	if uok && sok && u == 0 && s == 0 {
		errs = append(errs, field.Invalid(up, maxUnavailable.String(), "may not be 0 when `maxSurge` is 0"))
	}
	return errs
}

func validateIntOrPercent(v *intstr.IntOrString, path *field.Path) field.ErrorList {
	if v == nil {
		return nil
	}
	switch v.Type {
	case intstr.String:
		if msgs := utilvalidation.IsValidPercent(v.StrVal); len(msgs) > 0 {
			return field.ErrorList{field.Invalid(path, v.StrVal, "must be an integer or percentage (e.g '5%')")}
		}
	case intstr.Int:
		return nonNegative(nil, path, int64(v.IntVal))
	}
	return nil
}

// percentOrInt is the number in v (the percentage for "25%"); ok is false
// when v is absent or malformed.
func percentOrInt(v *intstr.IntOrString) (int, bool) {
	if v == nil {
		return 0, false
	}
	if v.Type == intstr.Int {
		return int(v.IntVal), true
	}
	n, err := strconv.Atoi(strings.TrimSuffix(v.StrVal, "%"))
	return n, err == nil && strings.HasSuffix(v.StrVal, "%")
}

const notAboveReplicas = "cannot be greater than status.replicas"

func validateDeploymentStatus(s *appsv1.DeploymentStatus) field.ErrorList {
	p := field.NewPath("status")
	var errs field.ErrorList
	errs = nonNegative(errs, p.Child("observedGeneration"), s.ObservedGeneration)
	for name, v := range map[string]int32{"replicas": s.Replicas, "updatedReplicas": s.UpdatedReplicas, "readyReplicas": s.ReadyReplicas, "availableReplicas": s.AvailableReplicas, "unavailableReplicas": s.UnavailableReplicas} {
		errs = nonNegative(errs, p.Child(name), int64(v))
	}
	if s.CollisionCount != nil {
		errs = nonNegative(errs, p.Child("collisionCount"), int64(*s.CollisionCount))
	}
	errs = replicaCounts(errs, p, s.Replicas, s.ReadyReplicas, s.AvailableReplicas, "updatedReplicas", s.UpdatedReplicas)
	return sortByField(errs)
}

// replicaCounts checks the ordering every workload status keeps:
// available ≤ ready ≤ replicas, and the extra count ≤ replicas.
func replicaCounts(errs field.ErrorList, p *field.Path, replicas, ready, available int32, extraName string, extra int32) field.ErrorList {
	for _, c := range []struct {
		name string
		v    int32
	}{{extraName, extra}, {"readyReplicas", ready}, {"availableReplicas", available}} {
		if c.v > replicas {
			errs = append(errs, field.Invalid(p.Child(c.name), c.v, notAboveReplicas))
		}
	}
	if available > ready {
		errs = append(errs, field.Invalid(p.Child("availableReplicas"), available, "cannot be greater than readyReplicas"))
	}
	return errs
}

func validateReplicaSetStatus(s *appsv1.ReplicaSetStatus) field.ErrorList {
	p := field.NewPath("status")
	var errs field.ErrorList
	errs = nonNegative(errs, p.Child("observedGeneration"), s.ObservedGeneration)
	for name, v := range map[string]int32{"replicas": s.Replicas, "fullyLabeledReplicas": s.FullyLabeledReplicas, "readyReplicas": s.ReadyReplicas, "availableReplicas": s.AvailableReplicas} {
		errs = nonNegative(errs, p.Child(name), int64(v))
	}
	errs = replicaCounts(errs, p, s.Replicas, s.ReadyReplicas, s.AvailableReplicas, "fullyLabeledReplicas", s.FullyLabeledReplicas)
	return sortByField(errs)
}

func validateDaemonSetStatus(s *appsv1.DaemonSetStatus) field.ErrorList {
	p := field.NewPath("status")
	var errs field.ErrorList
	errs = nonNegative(errs, p.Child("observedGeneration"), s.ObservedGeneration)
	for name, v := range map[string]int32{
		"currentNumberScheduled": s.CurrentNumberScheduled, "numberMisscheduled": s.NumberMisscheduled,
		"desiredNumberScheduled": s.DesiredNumberScheduled, "numberReady": s.NumberReady,
		"updatedNumberScheduled": s.UpdatedNumberScheduled, "numberAvailable": s.NumberAvailable,
		"numberUnavailable": s.NumberUnavailable,
	} {
		errs = nonNegative(errs, p.Child(name), int64(v))
	}
	if s.CollisionCount != nil {
		errs = nonNegative(errs, p.Child("collisionCount"), int64(*s.CollisionCount))
	}
	return sortByField(errs)
}

// validateControllerRevision checks a ControllerRevision (old is nil on
// create): its data, when given, is a JSON object, its revision is not
// negative, and its data never changes (Kubernetes' rule: a revision is a
// record of what was).
func validateControllerRevision(r, old *appsv1.ControllerRevision) field.ErrorList {
	var errs field.ErrorList
	if old == nil {
		errs = objectMeta(&r.ObjectMeta, true, nameIsDNSSubdomain)
	}
	errs = nonNegative(errs, field.NewPath("revision"), r.Revision)
	if raw := r.Data.Raw; len(raw) > 0 {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("data"), "<data>", "must be a JSON object: "+err.Error()))
		}
	}
	if old != nil && !sameJSON(r.Data.Raw, old.Data.Raw) {
		errs = append(errs, field.Forbidden(field.NewPath("data"), "a ControllerRevision's data is immutable; create a new revision"))
	}
	return errs
}

// sameJSON compares two JSON documents as values, so that a client's
// re-encoding (other spacing, other key order) is not a change.
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

var jobRestartPolicies = []corev1.RestartPolicy{corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}

// validateJob checks a Job (old is nil on create): a selector that matches
// its template, a template whose pods end (restartPolicy OnFailure or
// Never), counts that are not negative, and — once created — the
// selector, completions mode and template fixed, as in Kubernetes (the
// template may change only while the Job is suspended).
func validateJob(j, old *batchv1.Job, opts Options) field.ErrorList {
	var errs field.ErrorList
	if old == nil {
		errs = objectMeta(&j.ObjectMeta, true, nameIsDNSSubdomain)
	}
	var oldSpec *batchv1.JobSpec
	if old != nil {
		oldSpec = &old.Spec
	}
	return append(errs, validateJobSpec(j.Name, &j.Spec, oldSpec, specPath, opts)...)
}

// validateJobSpec checks a Job's spec at p, or a CronJob's Job template's;
// name is the (longest) name of the Job, for its pods' hostnames.
func validateJobSpec(name string, s, old *batchv1.JobSpec, p *field.Path, opts Options) field.ErrorList {
	var errs field.ErrorList
	sp := p.Child("selector")
	if s.Selector == nil {
		errs = append(errs, field.Required(sp, "a Job without manualSelector gets one from its UID; with manualSelector, give one"))
	} else {
		errs = append(errs, metav1validation.ValidateLabelSelector(s.Selector, metav1validation.LabelSelectorValidationOptions{}, sp)...)
		if sel, err := metav1.LabelSelectorAsSelector(s.Selector); err == nil && (sel.Empty() || !sel.Matches(labels.Set(s.Template.Labels))) {
			errs = append(errs, field.Invalid(p.Child("template", "metadata", "labels"), s.Template.Labels, "`selector` does not match template `labels`"))
		}
	}
	tp := p.Child("template")
	errs = append(errs, metav1validation.ValidateLabels(s.Template.Labels, tp.Child("metadata", "labels"))...)
	errs = append(errs, validatePodSpec(&s.Template.Spec, tp.Child("spec"))...)
	if !oneOf(s.Template.Spec.RestartPolicy, jobRestartPolicies...) {
		errs = append(errs, field.NotSupported(tp.Child("spec", "restartPolicy"), s.Template.Spec.RestartPolicy, jobRestartPolicies))
	}
	var oldPod *corev1.PodSpec
	if old != nil {
		oldPod = &old.Template.Spec
	}
	errs = append(errs, validateImages(&s.Template.Spec, oldPod, tp.Child("spec"), opts.ImagePolicy())...)
	for _, c := range []struct {
		name string
		v    *int32
	}{{"parallelism", s.Parallelism}, {"completions", s.Completions}, {"backoffLimit", s.BackoffLimit}, {"ttlSecondsAfterFinished", s.TTLSecondsAfterFinished}} {
		if c.v != nil {
			errs = nonNegative(errs, p.Child(c.name), int64(*c.v))
		}
	}
	if s.ActiveDeadlineSeconds != nil {
		errs = positive(errs, p.Child("activeDeadlineSeconds"), *s.ActiveDeadlineSeconds)
	}
	if m := s.CompletionMode; m != nil && !oneOf(*m, batchv1.NonIndexedCompletion, batchv1.IndexedCompletion) {
		errs = append(errs, field.NotSupported(p.Child("completionMode"), *m, []batchv1.CompletionMode{batchv1.NonIndexedCompletion, batchv1.IndexedCompletion}))
	}
	errs = append(errs, validateIndexed(name, s, p)...)
	errs = append(errs, validatePodFailurePolicy(s, p)...)
	if old != nil {
		errs = immutable(errs, sp, s.Selector, old.Selector)
		errs = immutable(errs, p.Child("completionMode"), s.CompletionMode, old.CompletionMode)
		if !(old.Suspend != nil && *old.Suspend) {
			errs = immutable(errs, tp, s.Template, old.Template)
		}
	}
	return errs
}

// Limits of Indexed Jobs, as Kubernetes'.
const (
	maxParallelismForIndexedJob = 100000
	maxFailedIndexesLimit       = 100000
	// Kubernetes keeps a Job's failed indexes in one status string; it
	// bounds completions so that string stays small.
	maxCompletionsWithBackoffLimitPerIndex = 100000
)

// validateIndexed checks completionMode Indexed and the per-index
// fields, which only it may use.
func validateIndexed(name string, s *batchv1.JobSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	indexed := s.CompletionMode != nil && *s.CompletionMode == batchv1.IndexedCompletion
	if !indexed {
		if s.BackoffLimitPerIndex != nil {
			errs = append(errs, field.Invalid(p.Child("backoffLimitPerIndex"), *s.BackoffLimitPerIndex, "requires indexed completion mode"))
		}
		if s.MaxFailedIndexes != nil {
			errs = append(errs, field.Invalid(p.Child("maxFailedIndexes"), *s.MaxFailedIndexes, "requires indexed completion mode"))
		}
		return errs
	}
	if s.SuccessPolicy != nil {
		errs = append(errs, field.Forbidden(p.Child("successPolicy"), "not run by this hub: an Indexed Job succeeds when every index has"))
	}
	if s.Completions == nil {
		errs = append(errs, field.Required(p.Child("completions"), "when completion mode is Indexed"))
	}
	if s.Parallelism != nil && *s.Parallelism > maxParallelismForIndexedJob {
		errs = append(errs, field.Invalid(p.Child("parallelism"), *s.Parallelism, fmt.Sprintf("must be less than or equal to %d when completion mode is Indexed", maxParallelismForIndexedJob)))
	}
	if s.Completions != nil && *s.Completions > 0 {
		// Each pod's hostname is <job>-<index>, one DNS label.
		if host := fmt.Sprintf("%s-%d", name, *s.Completions-1); len(host) > 63 {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), name, fmt.Sprintf("too long for an Indexed Job of %d completions: its pods' hostnames (%s) would exceed 63 characters; use a shorter name", *s.Completions, host)))
		}
	}
	if s.BackoffLimitPerIndex != nil {
		errs = nonNegative(errs, p.Child("backoffLimitPerIndex"), int64(*s.BackoffLimitPerIndex))
		if s.Completions != nil && *s.Completions > maxCompletionsWithBackoffLimitPerIndex {
			errs = append(errs, field.Invalid(p.Child("completions"), *s.Completions, fmt.Sprintf("must be less than or equal to %d when backoffLimitPerIndex is specified", maxCompletionsWithBackoffLimitPerIndex)))
		}
	}
	if m := s.MaxFailedIndexes; m != nil {
		errs = nonNegative(errs, p.Child("maxFailedIndexes"), int64(*m))
		switch {
		case s.BackoffLimitPerIndex == nil:
			errs = append(errs, field.Required(p.Child("backoffLimitPerIndex"), "when maxFailedIndexes is specified"))
		case *m > maxFailedIndexesLimit:
			errs = append(errs, field.Invalid(p.Child("maxFailedIndexes"), *m, fmt.Sprintf("must be less than or equal to %d", maxFailedIndexesLimit)))
		case s.Completions != nil && *m > *s.Completions:
			errs = append(errs, field.Invalid(p.Child("maxFailedIndexes"), *m, "must be less than or equal to completions"))
		}
	}
	return errs
}

var podFailurePolicyActions = []batchv1.PodFailurePolicyAction{
	batchv1.PodFailurePolicyActionFailJob, batchv1.PodFailurePolicyActionFailIndex,
	batchv1.PodFailurePolicyActionIgnore, batchv1.PodFailurePolicyActionCount,
}

// validatePodFailurePolicy checks the rules' actions and requirements:
// FailIndex needs backoffLimitPerIndex, as in Kubernetes, and a rule says
// exit codes or pod conditions, not both.
func validatePodFailurePolicy(s *batchv1.JobSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	rpPath := p.Child("template", "spec", "restartPolicy")
	if s.BackoffLimitPerIndex != nil && s.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		errs = append(errs, field.NotSupported(rpPath, s.Template.Spec.RestartPolicy, []corev1.RestartPolicy{corev1.RestartPolicyNever}))
	}
	if s.PodFailurePolicy == nil {
		return errs
	}
	if s.BackoffLimitPerIndex == nil && s.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		errs = append(errs, field.Invalid(rpPath, s.Template.Spec.RestartPolicy, "only `Never` is supported when podFailurePolicy is specified"))
	}
	rules := p.Child("podFailurePolicy", "rules")
	for i, r := range s.PodFailurePolicy.Rules {
		p := rules.Index(i)
		switch {
		case !oneOf(r.Action, podFailurePolicyActions...):
			errs = append(errs, field.NotSupported(p.Child("action"), r.Action, podFailurePolicyActions))
		case r.Action == batchv1.PodFailurePolicyActionFailIndex && s.BackoffLimitPerIndex == nil:
			errs = append(errs, field.Invalid(p.Child("action"), r.Action, "requires the backoffLimitPerIndex to be set"))
		}
		if (r.OnExitCodes == nil) == (len(r.OnPodConditions) == 0) {
			errs = append(errs, field.Invalid(p, "", "specifying one of OnExitCodes and OnPodConditions is required"))
		}
		if c := r.OnExitCodes; c != nil {
			ops := []batchv1.PodFailurePolicyOnExitCodesOperator{batchv1.PodFailurePolicyOnExitCodesOpIn, batchv1.PodFailurePolicyOnExitCodesOpNotIn}
			if !oneOf(c.Operator, ops...) {
				errs = append(errs, field.NotSupported(p.Child("onExitCodes", "operator"), c.Operator, ops))
			}
			if len(c.Values) == 0 {
				errs = append(errs, field.Required(p.Child("onExitCodes", "values"), "at least one exit code"))
			}
		}
	}
	return errs
}

func validateJobStatus(st *batchv1.JobStatus) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("status")
	for _, c := range []struct {
		name string
		v    int32
	}{{"active", st.Active}, {"succeeded", st.Succeeded}, {"failed", st.Failed}} {
		errs = nonNegative(errs, p.Child(c.name), int64(c.v))
	}
	if st.Ready != nil {
		errs = nonNegative(errs, p.Child("ready"), int64(*st.Ready))
	}
	return errs
}
