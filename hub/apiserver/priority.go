package apiserver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/scheduling"
)

var priorityClassResource, _ = api.ResourceForKind(schedulingv1.SchemeGroupVersion.WithKind("PriorityClass"))

// admitPriority is kube-apiserver's Priority admission. A new pod gets
// spec.priority (and the class's preemptionPolicy) from its
// priorityClassName, or from the globalDefault class when it names none;
// a class that does not exist, or a priority the client set that differs
// from the class's, is refused with Kubernetes' 403. A PriorityClass may
// be the globalDefault only while no other is. old is nil on create.
func (s *Server) admitPriority(ctx context.Context, obj, old runtime.Object) error {
	switch o := obj.(type) {
	case *corev1.Pod:
		if old != nil {
			return nil
		}
		return s.resolvePodPriority(ctx, o)
	case *schedulingv1.PriorityClass:
		if !o.GlobalDefault {
			return nil
		}
		if d := s.defaultPriorityClass(); d != nil && d.Name != o.Name {
			return apierrors.NewForbidden(priorityClassResource.GVR.GroupResource(), o.Name,
				fmt.Errorf("PriorityClass %v is already marked as default. Only one default can exist", d.Name))
		}
	}
	return nil
}

func (s *Server) resolvePodPriority(ctx context.Context, pod *corev1.Pod) error {
	var priority int32
	var policy *corev1.PreemptionPolicy
	if pod.Spec.PriorityClassName == "" {
		if d := s.defaultPriorityClass(); d != nil {
			pod.Spec.PriorityClassName = d.Name
			priority, policy = d.Value, d.PreemptionPolicy
		}
	} else {
		// The store backs the cache up: a class created a moment ago
		// (a manifest with the class and its pods) must be found.
		obj, err := serverLookup{s}.Get(ctx, priorityClassResource.GVR, "", pod.Spec.PriorityClassName)
		if apierrors.IsNotFound(err) {
			return apierrors.NewForbidden(corev1.Resource("pods"), pod.Name,
				fmt.Errorf("no PriorityClass with name %v was found", pod.Spec.PriorityClassName))
		}
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("failed to get PriorityClass with name %s: %w", pod.Spec.PriorityClassName, err))
		}
		pc := obj.(*schedulingv1.PriorityClass)
		priority, policy = pc.Value, pc.PreemptionPolicy
	}
	if pod.Spec.Priority != nil && *pod.Spec.Priority != priority {
		return apierrors.NewForbidden(corev1.Resource("pods"), pod.Name,
			fmt.Errorf("the integer value of priority (%d) must not be provided in pod spec; priority admission controller computed %d from the given PriorityClass name", *pod.Spec.Priority, priority))
	}
	pod.Spec.Priority = &priority
	if policy != nil {
		if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy != *policy {
			return apierrors.NewForbidden(corev1.Resource("pods"), pod.Name,
				fmt.Errorf("the string value of PreemptionPolicy (%s) must not be provided in pod spec; priority admission controller computed %s from the given PriorityClass name", *pod.Spec.PreemptionPolicy, *policy))
		}
		p := *policy
		pod.Spec.PreemptionPolicy = &p
	}
	return nil
}

// defaultPriorityClass is the globalDefault class; should there be more
// than one (written before this check existed), the lowest value wins, as
// in Kubernetes.
func (s *Server) defaultPriorityClass() *schedulingv1.PriorityClass {
	objs, _ := s.cache.list(priorityClassResource, &filter{})
	var best *schedulingv1.PriorityClass
	for _, co := range objs {
		pc := co.obj.(*schedulingv1.PriorityClass)
		if pc.GlobalDefault && (best == nil || pc.Value < best.Value) {
			best = pc
		}
	}
	return best
}

// bootstrapPriorityClasses creates the built-in classes a hub without
// them lacks (a new hub, or one from before they existed).
func (s *Server) bootstrapPriorityClasses(ctx context.Context) error {
	for _, pc := range scheduling.SystemPriorityClasses() {
		if s.cache.get(priorityClassResource, "", pc.Name) != nil {
			continue
		}
		if _, _, err := s.create(ctx, priorityClassResource, pc, false, owner{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the built-in PriorityClass %s: %w", pc.Name, err)
		}
	}
	return nil
}
