package validation

import (
	"fmt"
	"net/netip"
	"reflect"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"flotilla.dev/flotilla/api"
	apiimage "flotilla.dev/flotilla/api/image"
	"flotilla.dev/flotilla/api/v1alpha1"
)

// Options are the hub's policy knobs. The zero value is the strict policy
// with the network ranges of api/labels.go.
type Options struct {
	// AllowTagImages admits images referenced by tag only. By default every
	// image must be pinned by digest (name@sha256:<64 hex>).
	AllowTagImages bool
	// Images is the digest policy shared with the agents (api/image): the
	// repositories whose images may be referenced by tag. AllowTagImages,
	// when set, allows them all.
	Images apiimage.Policy
	// ServiceCIDR is the range a Service's clusterIP must come from; the
	// zero Prefix means api.ServiceCIDR.
	ServiceCIDR netip.Prefix
	// NodePortMin and NodePortMax bound Service node ports; zero means
	// api.NodePortMin and api.NodePortMax.
	NodePortMin, NodePortMax int32
}

// ImagePolicy is the digest policy these options make.
func (o Options) ImagePolicy() apiimage.Policy {
	if o.AllowTagImages {
		return apiimage.AllowAllTags()
	}
	return o.Images
}

func (o Options) serviceCIDR() netip.Prefix {
	if o.ServiceCIDR.IsValid() {
		return o.ServiceCIDR
	}
	return netip.MustParsePrefix(api.ServiceCIDR)
}

func (o Options) nodePortRange() (int32, int32) {
	lo, hi := o.NodePortMin, o.NodePortMax
	if lo == 0 {
		lo = api.NodePortMin
	}
	if hi == 0 {
		hi = api.NodePortMax
	}
	return lo, hi
}

var metaPath = field.NewPath("metadata")

// ValidateCreate checks a new object of any served kind, after defaulting
// and after its name was generated. Every error names the field, in the
// JSON path syntax Kubernetes uses ("spec.containers[0].image").
func ValidateCreate(obj runtime.Object, opts Options) field.ErrorList {
	switch o := obj.(type) {
	case *corev1.Pod:
		return validatePodCreate(o, opts)
	case *corev1.Service:
		return validateService(o, opts)
	case *corev1.ConfigMap:
		return validateConfigMap(o)
	case *corev1.Secret:
		return validateSecret(o)
	case *corev1.Namespace:
		return validateNamespace(o)
	case *corev1.Node:
		return validateNode(o)
	case *corev1.Event:
		return validateEvent(o)
	case *appsv1.Deployment:
		return validateDeployment(o, nil, opts)
	case *appsv1.ReplicaSet:
		return validateReplicaSet(o, nil, opts)
	case *appsv1.DaemonSet:
		return validateDaemonSet(o, nil, opts)
	case *appsv1.ControllerRevision:
		return validateControllerRevision(o, nil)
	case *batchv1.Job:
		return validateJob(o, nil, opts)
	case *batchv1.CronJob:
		return validateCronJob(o, nil, opts)
	case *coordinationv1.Lease:
		return validateLease(o)
	case *discoveryv1.EndpointSlice:
		return validateEndpointSlice(o)
	case *schedulingv1.PriorityClass:
		return validatePriorityClass(o, nil)
	case *v1alpha1.GitSource:
		return validateGitSource(o)
	case *v1alpha1.RolloutPolicy:
		return validateRolloutPolicy(o)
	}
	return unknownKind(obj)
}

// ValidateUpdate checks obj, the new version of old, for an update of the
// main resource (not a subresource): the new object must be valid, and it
// may change only what Kubernetes lets change (a Pod's images, tolerations
// and active deadline; never a workload's selector, a Service's clusterIP
// once set, an immutable ConfigMap's data, ...). Images that did not change
// are not checked against the image policy again, so tightening the policy
// never blocks relabelling an existing object.
func ValidateUpdate(obj, old runtime.Object, opts Options) field.ErrorList {
	errs, ok := metaUpdate(obj, old)
	if !ok {
		return errs
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		return append(errs, validatePodUpdate(o, old.(*corev1.Pod), opts)...)
	case *corev1.Service:
		return append(errs, validateServiceUpdate(o, old.(*corev1.Service), opts)...)
	case *corev1.ConfigMap:
		return append(errs, validateConfigMapUpdate(o, old.(*corev1.ConfigMap))...)
	case *corev1.Secret:
		return append(errs, validateSecretUpdate(o, old.(*corev1.Secret))...)
	case *corev1.Namespace:
		errs = append(errs, validateNamespacePodSecurity(o, old.(*corev1.Namespace))...)
		return append(errs, validateNamespaceSpec(o)...)
	case *corev1.Node:
		return append(errs, validateNodeUpdate(o, old.(*corev1.Node))...)
	case *corev1.Event:
		return append(errs, validateEventBody(o)...)
	case *appsv1.Deployment:
		return append(errs, validateDeployment(o, old.(*appsv1.Deployment), opts)...)
	case *appsv1.ReplicaSet:
		return append(errs, validateReplicaSet(o, old.(*appsv1.ReplicaSet), opts)...)
	case *appsv1.DaemonSet:
		return append(errs, validateDaemonSet(o, old.(*appsv1.DaemonSet), opts)...)
	case *appsv1.ControllerRevision:
		return append(errs, validateControllerRevision(o, old.(*appsv1.ControllerRevision))...)
	case *batchv1.Job:
		return append(errs, validateJob(o, old.(*batchv1.Job), opts)...)
	case *batchv1.CronJob:
		return append(errs, validateCronJob(o, old.(*batchv1.CronJob), opts)...)
	case *coordinationv1.Lease:
		return append(errs, validateLeaseSpec(o)...)
	case *discoveryv1.EndpointSlice:
		return append(errs, validateEndpointSliceUpdate(o, old.(*discoveryv1.EndpointSlice))...)
	case *schedulingv1.PriorityClass:
		return append(errs, validatePriorityClass(o, old.(*schedulingv1.PriorityClass))...)
	case *v1alpha1.GitSource:
		return append(errs, validateGitSourceSpec(o)...)
	case *v1alpha1.RolloutPolicy:
		return append(errs, validateRolloutPolicySpec(&o.Spec)...)
	}
	return unknownKind(obj)
}

// ValidateStatusUpdate checks an update through the status subresource:
// the metadata rules of any update plus the kind's status rules (a
// terminated pod stays terminated, counts are not negative, IPs parse,
// conditions are well formed). The apiserver has already copied the old
// spec into obj.
func ValidateStatusUpdate(obj, old runtime.Object) field.ErrorList {
	errs, ok := metaUpdate(obj, old)
	if !ok {
		return errs
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		return append(errs, validatePodStatusUpdate(o, old.(*corev1.Pod))...)
	case *corev1.Node:
		return append(errs, validateNodeStatus(o)...)
	case *corev1.Namespace:
		return append(errs, validateNamespaceStatus(o)...)
	case *corev1.Service:
		return append(errs, validateServiceStatus(o)...)
	case *appsv1.Deployment:
		return append(errs, validateDeploymentStatus(&o.Status)...)
	case *appsv1.ReplicaSet:
		return append(errs, validateReplicaSetStatus(&o.Status)...)
	case *appsv1.DaemonSet:
		return append(errs, validateDaemonSetStatus(&o.Status)...)
	case *batchv1.Job:
		return append(errs, validateJobStatus(&o.Status)...)
	case *batchv1.CronJob:
		return errs
	case *v1alpha1.GitSource:
		return append(errs, validateGitSourceStatus(&o.Status)...)
	case *v1alpha1.RolloutPolicy:
		return append(errs, validateRolloutPolicyStatus(&o.Status)...)
	case *corev1.ConfigMap, *corev1.Secret, *corev1.Event, *coordinationv1.Lease, *discoveryv1.EndpointSlice, *appsv1.ControllerRevision, *schedulingv1.PriorityClass:
		return append(errs, field.InternalError(field.NewPath("status"),
			fmt.Errorf("%T has no status subresource", obj)))
	}
	return unknownKind(obj)
}

// metaUpdate checks the metadata rules every update shares; ok is false
// when obj and old cannot be compared at all.
func metaUpdate(obj, old runtime.Object) (field.ErrorList, bool) {
	if reflect.TypeOf(obj) != reflect.TypeOf(old) {
		return field.ErrorList{field.InternalError(field.NewPath("kind"), fmt.Errorf("cannot update a %T with a %T", old, obj))}, false
	}
	newMeta, err1 := meta.Accessor(obj)
	oldMeta, err2 := meta.Accessor(old)
	if err1 != nil || err2 != nil {
		return unknownKind(obj), false
	}
	return apivalidation.ValidateObjectMetaAccessorUpdate(newMeta, oldMeta, metaPath), true
}

// unknownKind is an internal error: the hub must never store a kind it
// does not know how to validate.
func unknownKind(obj runtime.Object) field.ErrorList {
	return field.ErrorList{field.InternalError(field.NewPath("kind"), fmt.Errorf("no validation for %T: it is not a kind the hub serves", obj))}
}
