package validation

import (
	"sort"

	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Name rules, per kind, as Kubernetes has them.
var (
	nameIsDNSSubdomain = apivalidation.NameIsDNSSubdomain
	nameIsDNSLabel     = apivalidation.NameIsDNSLabel
	nameIsDNS1035Label = apivalidation.NameIsDNS1035Label
)

func objectMeta(m *metav1.ObjectMeta, namespaced bool, nameFn apivalidation.ValidateNameFunc) field.ErrorList {
	return apivalidation.ValidateObjectMeta(m, namespaced, nameFn, metaPath)
}

// appendMsgs turns the messages of a content check into Invalid errors.
func appendMsgs(errs field.ErrorList, path *field.Path, value any, msgs []string) field.ErrorList {
	for _, m := range msgs {
		errs = append(errs, field.Invalid(path, value, m))
	}
	return errs
}

func dnsLabel(errs field.ErrorList, path *field.Path, v string) field.ErrorList {
	return appendMsgs(errs, path, v, content.IsDNS1123Label(v))
}

func dnsSubdomain(errs field.ErrorList, path *field.Path, v string) field.ErrorList {
	return appendMsgs(errs, path, v, content.IsDNS1123Subdomain(v))
}

func qualifiedName(errs field.ErrorList, path *field.Path, v string) field.ErrorList {
	return appendMsgs(errs, path, v, content.IsQualifiedName(v))
}

func labelValue(errs field.ErrorList, path *field.Path, v string) field.ErrorList {
	return appendMsgs(errs, path, v, content.IsLabelValue(v))
}

func nonNegative(errs field.ErrorList, path *field.Path, v int64) field.ErrorList {
	if v < 0 {
		errs = append(errs, field.Invalid(path, v, "must be greater than or equal to 0"))
	}
	return errs
}

func positive(errs field.ErrorList, path *field.Path, v int64) field.ErrorList {
	if v <= 0 {
		errs = append(errs, field.Invalid(path, v, "must be greater than 0"))
	}
	return errs
}

func immutable(errs field.ErrorList, path *field.Path, newV, oldV any) field.ErrorList {
	return append(errs, apivalidation.ValidateImmutableField(newV, oldV, path)...)
}

// sortedKeys gives map keys in a fixed order so that error lists are
// stable from one request to the next.
func sortedKeys[K ~string, V any](m map[K]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	return keys
}

func oneOf[T ~string](v T, allowed ...T) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	return false
}

// requireString reports an empty string field and otherwise checks it with fn.
func requireString(errs field.ErrorList, path *field.Path, v string, fn func(field.ErrorList, *field.Path, string) field.ErrorList) field.ErrorList {
	if v == "" {
		return append(errs, field.Required(path, ""))
	}
	if fn != nil {
		return fn(errs, path, v)
	}
	return errs
}

// sortByField orders errors by field path, for lists built from maps.
func sortByField(errs field.ErrorList) field.ErrorList {
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Field < errs[j].Field })
	return errs
}
