package validation

import (
	"fmt"
	"maps"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/podutil"
)

// Pod Security Standards levels, and the namespace labels that choose
// them, as Kubernetes' Pod Security admission has them.
const (
	PodSecurityPrivileged = string(psapi.LevelPrivileged)
	PodSecurityBaseline   = string(psapi.LevelBaseline)
	PodSecurityRestricted = string(psapi.LevelRestricted)

	LabelPodSecurityEnforce = psapi.EnforceLevelLabel // pod-security.kubernetes.io/enforce
	LabelPodSecurityWarn    = psapi.WarnLevelLabel    // pod-security.kubernetes.io/warn
)

// PodSecurity is the hub's pod policy: the Pod Security Standards
// (k8s.io/pod-security-admission's checks), enforced on pods and warned
// about on the pod templates of Deployments, ReplicaSets and DaemonSets,
// as Kubernetes' PodSecurity admission does. A namespace chooses its level
// with the label pod-security.kubernetes.io/enforce (and -warn, -audit,
// -version as in Kubernetes); a namespace without the label gets
// Namespaces[name], else Default.
//
// Mirror pods are not checked: they record what a device runs from its own
// manifests dir, which the hub cannot stop; refusing the record would only
// hide the pod (and mirror pods are never adopted or endpoints, see
// hub/auth).
type PodSecurity struct {
	// Default is the level of namespaces without the label; baseline
	// when empty.
	Default string
	// Namespaces are the levels of namespaces without the label, by name
	// (DefaultPodSecurity: flotilla-system privileged).
	Namespaces map[string]string
}

// DefaultPodSecurity is the hub's policy unless it is told otherwise:
// baseline everywhere but flotilla-system, which stays privileged for the
// fleet's own DaemonSets that need the device's network or files.
func DefaultPodSecurity() PodSecurity {
	return PodSecurity{Default: PodSecurityBaseline, Namespaces: map[string]string{api.NamespaceSystem: PodSecurityPrivileged}}
}

// Validate checks the levels.
func (p PodSecurity) Validate() error {
	if p.Default != "" {
		if _, err := psapi.ParseLevel(p.Default); err != nil {
			return fmt.Errorf("pod security: default level %q: want %s, %s or %s", p.Default, PodSecurityPrivileged, PodSecurityBaseline, PodSecurityRestricted)
		}
	}
	for ns, l := range p.Namespaces {
		if _, err := psapi.ParseLevel(l); err != nil {
			return fmt.Errorf("pod security: level %q of namespace %s: want %s, %s or %s", l, ns, PodSecurityPrivileged, PodSecurityBaseline, PodSecurityRestricted)
		}
	}
	return nil
}

var evaluator = func() policy.Evaluator {
	e, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		panic(fmt.Sprintf("pod security checks: %v", err))
	}
	return e
}()

// policyFor is the policy of a namespace: its labels over the hub's level
// for it. Invalid labels fail closed for enforce (restricted), open for
// warn, as in Kubernetes; namespace validation refuses them anyway.
func (p PodSecurity) policyFor(namespace string, labels map[string]string) psapi.Policy {
	level := p.Default
	if l, ok := p.Namespaces[namespace]; ok {
		level = l
	}
	lv := psapi.LevelVersion{Level: psapi.LevelBaseline, Version: psapi.LatestVersion()}
	if l, err := psapi.ParseLevel(level); err == nil && level != "" {
		lv.Level = l
	}
	def := psapi.Policy{Enforce: lv, Audit: lv, Warn: lv}
	pol, _ := psapi.PolicyToEvaluate(labels, def)
	if _, ok := labels[psapi.WarnLevelLabel]; !ok {
		// Warnings follow what is enforced unless the namespace says
		// otherwise (a privileged namespace gets none).
		pol.Warn = pol.Enforce
	}
	return pol
}

// Level is the enforce level a namespace has, for people and tools
// ("baseline:latest").
func (p PodSecurity) Level(ns *corev1.Namespace) string {
	return p.policyFor(ns.Name, ns.Labels).Enforce.String()
}

// CheckPod is the enforce step for a pod created or updated in ns: an
// error whose text is Kubernetes' ("violates PodSecurity
// \"baseline:latest\": privileged (container \"c\" must not set
// securityContext.privileged=true)"), for a 403 Forbidden. old is nil for
// a creation; an update is checked only when it changes what the policy
// looks at (images, containers), as in Kubernetes.
func (p PodSecurity) CheckPod(ns *corev1.Namespace, pod, old *corev1.Pod) error {
	if podutil.IsMirror(pod) {
		return nil
	}
	if old != nil && !significantPodUpdate(pod, old) {
		return nil
	}
	pol := p.policyFor(ns.Name, ns.Labels)
	if pol.Enforce.Level == psapi.LevelPrivileged {
		return nil
	}
	r := policy.AggregateCheckResults(evaluator.EvaluatePod(pol.Enforce, &pod.ObjectMeta, &pod.Spec))
	if r.Allowed {
		return nil
	}
	return fmt.Errorf("violates PodSecurity %q: %s", pol.Enforce.String(), r.ForbiddenDetail())
}

// TemplateWarnings are the warnings for a Deployment, ReplicaSet or
// DaemonSet whose pods would be refused in ns (at the namespace's warn
// level, which is its enforce level unless set apart): the object is
// admitted, its pods will not be.
func (p PodSecurity) TemplateWarnings(ns *corev1.Namespace, obj runtime.Object) []string {
	meta, spec := podTemplate(obj)
	if spec == nil {
		return nil
	}
	pol := p.policyFor(ns.Name, ns.Labels)
	if pol.Warn.Level == psapi.LevelPrivileged {
		return nil
	}
	r := policy.AggregateCheckResults(evaluator.EvaluatePod(pol.Warn, meta, spec))
	if r.Allowed {
		return nil
	}
	return []string{fmt.Sprintf("would violate PodSecurity %q: %s", pol.Warn.String(), r.ForbiddenDetail())}
}

// ExistingPodWarnings are the warnings for a namespace written with a
// level its pods do not meet (Kubernetes' words: "existing pods in
// namespace \"x\" violate the new PodSecurity enforce level ..."), then one
// per distinct violation, naming the first pod and how many others share
// it. The pods stay; they are refused when next created.
func (p PodSecurity) ExistingPodWarnings(ns *corev1.Namespace, pods []*corev1.Pod) []string {
	pol := p.policyFor(ns.Name, ns.Labels)
	if pol.Enforce.Level == psapi.LevelPrivileged {
		return nil
	}
	type group struct {
		first string
		n     int
	}
	var order []string
	groups := map[string]*group{}
	for _, pod := range pods {
		if podutil.IsMirror(pod) || pod.DeletionTimestamp != nil {
			continue
		}
		r := policy.AggregateCheckResults(evaluator.EvaluatePod(pol.Enforce, &pod.ObjectMeta, &pod.Spec))
		if r.Allowed {
			continue
		}
		why := r.ForbiddenDetail()
		g, ok := groups[why]
		if !ok {
			g = &group{first: pod.Name}
			groups[why] = g
			order = append(order, why)
		}
		g.n++
	}
	if len(order) == 0 {
		return nil
	}
	out := []string{fmt.Sprintf("existing pods in namespace %q violate the new PodSecurity enforce level %q", ns.Name, pol.Enforce.String())}
	for _, why := range order {
		g := groups[why]
		if g.n > 1 {
			out = append(out, fmt.Sprintf("%s (and %d other pods): %s", g.first, g.n-1, why))
		} else {
			out = append(out, fmt.Sprintf("%s: %s", g.first, why))
		}
	}
	return out
}

func podTemplate(obj runtime.Object) (*metav1.ObjectMeta, *corev1.PodSpec) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	case *appsv1.ReplicaSet:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	case *appsv1.DaemonSet:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	case *batchv1.Job:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	case *batchv1.CronJob:
		return &o.Spec.JobTemplate.Spec.Template.ObjectMeta, &o.Spec.JobTemplate.Spec.Template.Spec
	}
	return nil, nil
}

// significantPodUpdate: what of a pod may change after its creation and
// matters to the policy (Kubernetes' isSignificantPodUpdate).
func significantPodUpdate(pod, old *corev1.Pod) bool {
	if len(pod.Spec.Containers) != len(old.Spec.Containers) || len(pod.Spec.InitContainers) != len(old.Spec.InitContainers) {
		return true
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Image != old.Spec.Containers[i].Image {
			return true
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Image != old.Spec.InitContainers[i].Image {
			return true
		}
	}
	if len(pod.Spec.EphemeralContainers) != len(old.Spec.EphemeralContainers) {
		return true
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Image != old.Spec.EphemeralContainers[i].Image {
			return true
		}
	}
	return false
}

// podSecurityLabels are the labels of a namespace that choose its policy.
func podSecurityLabels(labels map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		if strings.HasPrefix(k, "pod-security.kubernetes.io/") {
			out[k] = v
		}
	}
	return out
}

// validateNamespacePodSecurity refuses pod-security.kubernetes.io labels
// that name no level or version, on a new namespace or when they change
// (Kubernetes' PodSecurity admission answers 422 alike).
func validateNamespacePodSecurity(ns, old *corev1.Namespace) field.ErrorList {
	if old != nil && maps.Equal(podSecurityLabels(ns.Labels), podSecurityLabels(old.Labels)) {
		return nil
	}
	_, errs := psapi.PolicyToEvaluate(ns.Labels, psapi.Policy{})
	return errs
}
