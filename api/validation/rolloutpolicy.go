package validation

import (
	"fmt"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"flotilla.dev/flotilla/api/v1alpha1"
)

var (
	rolloutFailureActions = []v1alpha1.RolloutFailureAction{v1alpha1.RolloutFailurePause, v1alpha1.RolloutFailureRollback}
	rolloutPhases         = []v1alpha1.RolloutPhase{v1alpha1.RolloutProgressing, v1alpha1.RolloutPaused, v1alpha1.RolloutRolledBack, v1alpha1.RolloutComplete}
)

func validateRolloutPolicy(rp *v1alpha1.RolloutPolicy) field.ErrorList {
	errs := objectMeta(&rp.ObjectMeta, true, nameIsDNSSubdomain)
	return append(errs, validateRolloutPolicySpec(&rp.Spec)...)
}

func validateRolloutPolicySpec(s *v1alpha1.RolloutPolicySpec) field.ErrorList {
	var errs field.ErrorList
	sp := specPath.Child("selector")
	switch {
	case s.Selector == nil:
		errs = append(errs, field.Required(sp, "the labels of the DaemonSets and Deployments to roll out in waves, e.g. matchLabels: {app: kiosk}"))
	case len(s.Selector.MatchLabels)+len(s.Selector.MatchExpressions) == 0:
		errs = append(errs, field.Invalid(sp, s.Selector, "must not be empty: an empty selector would stage every workload of the namespace; name their labels"))
	default:
		errs = append(errs, metav1validation.ValidateLabelSelector(s.Selector, metav1validation.LabelSelectorValidationOptions{}, sp)...)
	}

	wp := specPath.Child("waves")
	if len(s.Waves) == 0 {
		errs = append(errs, field.Required(wp, "at least one wave, e.g. a canary wave with a nodeSelector, then one without selector or percent for every device left"))
	}
	names := map[string]bool{}
	for i, w := range s.Waves {
		p := wp.Index(i)
		errs = requireString(errs, p.Child("name"), w.Name, dnsLabel)
		if w.Name != "" {
			if names[w.Name] {
				errs = append(errs, field.Duplicate(p.Child("name"), w.Name))
			}
			names[w.Name] = true
		}
		if w.NodeSelector != nil && w.Percent != nil {
			errs = append(errs, field.Forbidden(p.Child("percent"), "may not be set together with `nodeSelector`: a wave takes either the devices a selector matches or a share of the devices left"))
		}
		if w.NodeSelector != nil {
			errs = append(errs, metav1validation.ValidateLabelSelector(w.NodeSelector, metav1validation.LabelSelectorValidationOptions{}, p.Child("nodeSelector"))...)
		}
		if w.Percent != nil && (*w.Percent < 1 || *w.Percent > 100) {
			errs = append(errs, field.Invalid(p.Child("percent"), *w.Percent, "must be between 1 and 100 (the share of the devices no earlier wave took)"))
		}
		if w.NodeSelector == nil && w.Percent == nil && i != len(s.Waves)-1 {
			errs = append(errs, field.Invalid(p, w.Name, fmt.Sprintf(
				"a wave without `nodeSelector` or `percent` takes every device left, so only the last wave may have neither: the %d wave(s) after it would be empty", len(s.Waves)-1-i)))
		}
	}

	cp := specPath.Child("successCriteria")
	c := &s.SuccessCriteria
	if c.ReadySeconds == nil {
		errs = append(errs, field.Required(cp.Child("readySeconds"), ""))
	} else {
		errs = nonNegative(errs, cp.Child("readySeconds"), int64(*c.ReadySeconds))
	}
	if c.TimeoutSeconds == nil {
		errs = append(errs, field.Required(cp.Child("timeoutSeconds"), ""))
	} else {
		errs = positive(errs, cp.Child("timeoutSeconds"), int64(*c.TimeoutSeconds))
	}
	if c.MaxFailures == nil {
		errs = append(errs, field.Required(cp.Child("maxFailures"), ""))
	} else {
		errs = append(errs, validateMaxFailures(c.MaxFailures, cp.Child("maxFailures"))...)
	}
	if !oneOf(s.OnFailure, rolloutFailureActions...) {
		errs = append(errs, field.NotSupported(specPath.Child("onFailure"), s.OnFailure, rolloutFailureActions))
	}
	return errs
}

// validateMaxFailures accepts a count ≥ 0 or a percentage 0%..100%.
func validateMaxFailures(v *intstr.IntOrString, p *field.Path) field.ErrorList {
	if v.Type == intstr.Int {
		return nonNegative(nil, p, int64(v.IntVal))
	}
	n, ok := percentOrInt(v)
	if !ok || n < 0 || n > 100 {
		return field.ErrorList{field.Invalid(p, v.StrVal, `must be a count of devices (e.g. 2) or a percentage of the wave's devices between "0%" and "100%"`)}
	}
	return nil
}

func validateRolloutPolicyStatus(s *v1alpha1.RolloutPolicyStatus) field.ErrorList {
	sp := field.NewPath("status")
	errs := nonNegative(nil, sp.Child("observedGeneration"), s.ObservedGeneration)
	errs = append(errs, metav1validation.ValidateConditions(s.Conditions, sp.Child("conditions"))...)
	for i := range s.Workloads {
		w := &s.Workloads[i]
		p := sp.Child("workloads").Index(i)
		if !oneOf(w.Kind, "DaemonSet", "Deployment") {
			errs = append(errs, field.NotSupported(p.Child("kind"), w.Kind, []string{"DaemonSet", "Deployment"}))
		}
		errs = requireString(errs, p.Child("name"), w.Name, nil)
		errs = requireString(errs, p.Child("revision"), w.Revision, nil)
		if !oneOf(w.Phase, rolloutPhases...) {
			errs = append(errs, field.NotSupported(p.Child("phase"), w.Phase, rolloutPhases))
		}
		errs = append(errs, metav1validation.ValidateConditions(w.Conditions, p.Child("conditions"))...)
		for j, ws := range w.Waves {
			wp := p.Child("waves").Index(j)
			errs = nonNegative(errs, wp.Child("devices"), int64(ws.Devices))
			errs = nonNegative(errs, wp.Child("done"), int64(ws.Done))
			errs = nonNegative(errs, wp.Child("failed"), int64(ws.Failed))
			if ws.Done+ws.Failed > ws.Devices {
				errs = append(errs, field.Invalid(wp, fmt.Sprintf("done %d, failed %d", ws.Done, ws.Failed), fmt.Sprintf("done and failed devices may not be more than the wave's %d devices", ws.Devices)))
			}
			if len(ws.FailedDevices) > v1alpha1.MaxReportedFailures {
				errs = append(errs, field.TooMany(wp.Child("failedDevices"), len(ws.FailedDevices), v1alpha1.MaxReportedFailures))
			}
		}
	}
	return errs
}
