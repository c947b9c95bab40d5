package schedulertest

import (
	"fmt"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

// Binder counts the bindings the fake clientset accepted.
type Binder struct {
	bound atomic.Int64
	// OnBind, when set, runs after each accepted binding.
	OnBind func(namespace, pod, node string)
}

// Bound is the number of bindings accepted so far.
func (b *Binder) Bound() int64 { return b.bound.Load() }

// NewClientset returns a fake clientset holding objects, with binding
// support installed.
func NewClientset(objects ...runtime.Object) (*fake.Clientset, *Binder) {
	c := fake.NewSimpleClientset(objects...)
	return c, InstallBinding(c)
}

// InstallBinding makes c's pods/binding subresource bind pods.
func InstallBinding(c *fake.Clientset) *Binder {
	b := &Binder{}
	tracker := c.Tracker()
	c.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		ca, ok := action.(k8stesting.CreateAction)
		if !ok || ca.GetSubresource() != "binding" {
			return false, nil, nil
		}
		binding, ok := ca.GetObject().(*corev1.Binding)
		if !ok {
			return true, nil, apierrors.NewBadRequest(fmt.Sprintf("binding body is %T, want *v1.Binding", ca.GetObject()))
		}
		ns := ca.GetNamespace()
		obj, err := tracker.Get(podsGVR, ns, binding.Name)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*corev1.Pod).DeepCopy()
		if binding.UID != "" && binding.UID != pod.UID {
			return true, nil, apierrors.NewConflict(podsGVR.GroupResource(), binding.Name,
				fmt.Errorf("binding UID %s does not match pod UID %s", binding.UID, pod.UID))
		}
		if pod.Spec.NodeName != "" {
			return true, nil, apierrors.NewConflict(podsGVR.GroupResource(), binding.Name,
				fmt.Errorf("pod %s is already assigned to node %q", binding.Name, pod.Spec.NodeName))
		}
		pod.Spec.NodeName = binding.Target.Name
		setScheduled(pod)
		if err := tracker.Update(podsGVR, pod, ns); err != nil {
			return true, nil, err
		}
		b.bound.Add(1)
		if b.OnBind != nil {
			b.OnBind(ns, binding.Name, binding.Target.Name)
		}
		return true, binding, nil
	})
	return b
}

func setScheduled(pod *corev1.Pod) {
	cond := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodScheduled {
			pod.Status.Conditions[i] = cond
			return
		}
	}
	pod.Status.Conditions = append(pod.Status.Conditions, cond)
}
