package validation

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// podUpdatableFields is the message Kubernetes gives, word for word, so that
// people find the answer they already know.
const podUpdatableFields = "pod updates may not change fields other than `spec.containers[*].image`," +
	"`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations)," +
	"`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"

func validatePodUpdate(p, old *corev1.Pod, opts Options) field.ErrorList {
	spec := field.NewPath("spec")
	errs := validatePodSpec(&p.Spec, spec)
	errs = append(errs, validateImages(&p.Spec, &old.Spec, spec, opts.ImagePolicy())...)

	if len(p.Spec.Containers) != len(old.Spec.Containers) {
		return append(errs, field.Forbidden(spec.Child("containers"), "pod updates may not add or remove containers"))
	}
	if nd, od := p.Spec.ActiveDeadlineSeconds, old.Spec.ActiveDeadlineSeconds; od != nil {
		ap := spec.Child("activeDeadlineSeconds")
		switch {
		case nd == nil:
			errs = append(errs, field.Invalid(ap, nd, "must not update from a positive integer to nil value"))
		case *nd > *od:
			errs = append(errs, field.Invalid(ap, *nd, "must be less than or equal to previous value"))
		}
	}
	errs = append(errs, validateOnlyAddedTolerations(p.Spec.Tolerations, old.Spec.Tolerations, spec.Child("tolerations"))...)

	// Put the old values into the fields that may change; whatever still
	// differs is a change Kubernetes forbids.
	m := p.Spec.DeepCopy()
	for i := range m.Containers {
		m.Containers[i].Image = old.Spec.Containers[i].Image
	}
	for i := range m.InitContainers {
		if i < len(old.Spec.InitContainers) {
			m.InitContainers[i].Image = old.Spec.InitContainers[i].Image
		}
	}
	m.ActiveDeadlineSeconds = old.Spec.ActiveDeadlineSeconds
	m.Tolerations = old.Spec.Tolerations
	if g, og := m.TerminationGracePeriodSeconds, old.Spec.TerminationGracePeriodSeconds; g != nil && *g == 1 && og != nil && *og < 0 {
		m.TerminationGracePeriodSeconds = og
	}
	if gatesRemovedOnly(m.SchedulingGates, old.Spec.SchedulingGates) {
		m.SchedulingGates = old.Spec.SchedulingGates
	}
	if !apiequality.Semantic.DeepEqual(m, &old.Spec) {
		msg := podUpdatableFields
		if d := jsonDiff(old.Spec, *m, "spec", 5); len(d) > 0 {
			msg += "\n" + strings.Join(d, "\n")
		}
		errs = append(errs, field.Forbidden(spec, msg))
	}
	return errs
}

func gatesRemovedOnly(gates, old []corev1.PodSchedulingGate) bool {
	had := map[string]bool{}
	for _, g := range old {
		had[g.Name] = true
	}
	for _, g := range gates {
		if !had[g.Name] {
			return false
		}
	}
	return true
}

// validateOnlyAddedTolerations lets an update add tolerations and change the
// tolerationSeconds of existing ones, nothing else.
func validateOnlyAddedTolerations(tols, old []corev1.Toleration, path *field.Path) field.ErrorList {
	for _, o := range old {
		found := false
		for _, t := range tols {
			o.TolerationSeconds = t.TolerationSeconds
			if reflect.DeepEqual(o, t) {
				found = true
				break
			}
		}
		if !found {
			return field.ErrorList{field.Forbidden(path, "existing toleration can not be modified except its tolerationSeconds")}
		}
	}
	return nil
}

// jsonDiff lists up to limit leaves that differ between a and b, in JSON
// path syntax, so the Forbidden message says what the update changed.
func jsonDiff(a, b any, root string, limit int) []string {
	var av, bv any
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil || json.Unmarshal(ja, &av) != nil || json.Unmarshal(jb, &bv) != nil {
		return nil
	}
	var out []string
	var walk func(p string, x, y any)
	walk = func(p string, x, y any) {
		if len(out) >= limit || reflect.DeepEqual(x, y) {
			return
		}
		switch xt := x.(type) {
		case map[string]any:
			if yt, ok := y.(map[string]any); ok {
				keys := map[string]bool{}
				for k := range xt {
					keys[k] = true
				}
				for k := range yt {
					keys[k] = true
				}
				sorted := make([]string, 0, len(keys))
				for k := range keys {
					sorted = append(sorted, k)
				}
				sort.Strings(sorted)
				for _, k := range sorted {
					walk(p+"."+k, xt[k], yt[k])
				}
				return
			}
		case []any:
			if yt, ok := y.([]any); ok && len(xt) == len(yt) {
				for i := range xt {
					walk(fmt.Sprintf("%s[%d]", p, i), xt[i], yt[i])
				}
				return
			}
		}
		out = append(out, fmt.Sprintf("%s: %s -> %s", p, short(x), short(y)))
	}
	walk(root, av, bv)
	return out
}

func short(v any) string {
	if v == nil {
		return "(unset)"
	}
	b, _ := json.Marshal(v)
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(b)
}

var terminalPhases = []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed}

func validatePodStatusUpdate(p, old *corev1.Pod) field.ErrorList {
	var errs field.ErrorList
	sp := field.NewPath("status")
	phases := []corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown}
	if p.Status.Phase != "" && !oneOf(p.Status.Phase, phases...) {
		errs = append(errs, field.NotSupported(sp.Child("phase"), p.Status.Phase, phases))
	}
	if oneOf(old.Status.Phase, terminalPhases...) && p.Status.Phase != old.Status.Phase {
		errs = append(errs, field.Forbidden(sp.Child("phase"), fmt.Sprintf("cannot transition from terminal phase %q to %q", old.Status.Phase, p.Status.Phase)))
	}
	if p.Status.NominatedNodeName != "" {
		errs = dnsSubdomain(errs, sp.Child("nominatedNodeName"), p.Status.NominatedNodeName)
	}
	errs = append(errs, validateIPList(p.Status.PodIP, podIPs(p.Status.PodIPs), sp.Child("podIP"), sp.Child("podIPs"))...)
	errs = append(errs, validateIPList(p.Status.HostIP, hostIPs(p.Status.HostIPs), sp.Child("hostIP"), sp.Child("hostIPs"))...)
	errs = append(errs, validateContainerStatuses(p.Status.InitContainerStatuses, old.Status.InitContainerStatuses, p.Spec.InitContainers, p.Spec.RestartPolicy, sp.Child("initContainerStatuses"))...)
	errs = append(errs, validateContainerStatuses(p.Status.ContainerStatuses, old.Status.ContainerStatuses, p.Spec.Containers, p.Spec.RestartPolicy, sp.Child("containerStatuses"))...)
	return errs
}

func podIPs(ips []corev1.PodIP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.IP
	}
	return out
}

func hostIPs(ips []corev1.HostIP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.IP
	}
	return out
}

// validateIPList checks the single and the plural form of a pod's or
// node's addresses: valid, at most one per family, primary first.
func validateIPList(primary string, ips []string, primaryPath, listPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if primary != "" {
		if _, err := netip.ParseAddr(primary); err != nil {
			errs = append(errs, field.Invalid(primaryPath, primary, "must be a valid IP address"))
		}
	}
	if len(ips) > 2 {
		errs = append(errs, field.TooMany(listPath, len(ips), 2))
	}
	families := map[bool]bool{}
	for i, ip := range ips {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			errs = append(errs, field.Invalid(listPath.Index(i).Child("ip"), ip, "must be a valid IP address"))
			continue
		}
		if families[a.Is4()] {
			errs = append(errs, field.Invalid(listPath, ips, "may specify no more than one IP for each IP family"))
		}
		families[a.Is4()] = true
	}
	if primary != "" && len(ips) > 0 && ips[0] != primary {
		errs = append(errs, field.Invalid(listPath.Index(0).Child("ip"), ips[0], fmt.Sprintf("must match %s", primaryPath)))
	}
	return errs
}

func validateContainerStatuses(sts, old []corev1.ContainerStatus, cs []corev1.Container, rp corev1.RestartPolicy, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := map[string]bool{}
	sidecars := map[string]bool{}
	for _, c := range cs {
		names[c.Name] = true
		sidecars[c.Name] = c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
	}
	oldByName := map[string]*corev1.ContainerStatus{}
	for i := range old {
		oldByName[old[i].Name] = &old[i]
	}
	for i, st := range sts {
		ip := path.Index(i)
		if !names[st.Name] {
			errs = append(errs, field.NotFound(ip.Child("name"), st.Name))
			continue
		}
		errs = nonNegative(errs, ip.Child("restartCount"), int64(st.RestartCount))
		o := oldByName[st.Name]
		if o == nil || o.State.Terminated == nil || st.State.Terminated != nil || sidecars[st.Name] {
			continue
		}
		// A container that may not restart stays terminated.
		if rp == corev1.RestartPolicyNever || (rp == corev1.RestartPolicyOnFailure && o.State.Terminated.ExitCode == 0) {
			errs = append(errs, field.Forbidden(ip.Child("state"), "may not be transitioned to non-terminated state"))
		}
	}
	return errs
}
