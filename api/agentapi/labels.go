package agentapi

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ParseLabels reads Node labels written "k=v,k2=v2" (the agent's --labels,
// a join token's labels): spaces around keys and values are dropped, empty
// items skipped, a key given twice refused, and every key and value must
// pass ValidateLabels. "" is no labels.
func ParseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("label %q is not key=value: write labels as k=v,k2=v2", kv)
		}
		k = strings.TrimSpace(k)
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("label %s is given twice", k)
		}
		out[k] = strings.TrimSpace(v)
	}
	return out, ValidateLabels(out)
}

// ValidateLabels checks labels meant for a Node as Kubernetes does: every
// key a qualified name (an optional DNS-subdomain prefix and a name), every
// value a label value. Keys are checked in order, so the error is stable.
func ValidateLabels(labels map[string]string) error {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("label key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(labels[k]); len(errs) > 0 {
			return fmt.Errorf("label %s value %q: %s", k, labels[k], strings.Join(errs, "; "))
		}
	}
	return nil
}
