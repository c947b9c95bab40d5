package validation

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"flotilla.dev/flotilla/api/scheduling"
)

// validatePriorityClass checks a PriorityClass (old is nil on create) with
// kube-apiserver's rules and words: the "system-" names are the built-in
// classes' only, a user class stays at or below a billion, the policy is
// one of the two, and value and policy never change once set.
func validatePriorityClass(pc, old *schedulingv1.PriorityClass) field.ErrorList {
	var errs field.ErrorList
	if old == nil {
		errs = objectMeta(&pc.ObjectMeta, false, nameIsDNSSubdomain)
	}
	if scheduling.IsSystemName(pc.Name) {
		if ok, err := scheduling.IsKnownSystemPriorityClass(pc.Name, pc.Value, pc.GlobalDefault); !ok {
			errs = append(errs, field.Forbidden(metaPath.Child("name"),
				"priority class names with '"+scheduling.SystemPriorityClassPrefix+"' prefix are reserved for system use only. error: "+err.Error()))
		}
	} else if pc.Value > scheduling.HighestUserDefinablePriority {
		errs = append(errs, field.Forbidden(field.NewPath("value"),
			fmt.Sprintf("maximum allowed value of a user defined priority is %v", scheduling.HighestUserDefinablePriority)))
	}
	policies := []corev1.PreemptionPolicy{corev1.PreemptLowerPriority, corev1.PreemptNever}
	if p := pc.PreemptionPolicy; p == nil {
		errs = append(errs, field.Required(field.NewPath("preemptionPolicy"), ""))
	} else if !oneOf(*p, policies...) {
		errs = append(errs, field.NotSupported(field.NewPath("preemptionPolicy"), *p, policies))
	}
	if old != nil {
		if pc.Value != old.Value {
			errs = append(errs, field.Forbidden(field.NewPath("value"), "may not be changed in an update."))
		}
		if pc.PreemptionPolicy != nil && old.PreemptionPolicy != nil && *pc.PreemptionPolicy != *old.PreemptionPolicy {
			errs = append(errs, field.Invalid(field.NewPath("preemptionPolicy"), *pc.PreemptionPolicy, "field is immutable"))
		}
	}
	return errs
}
