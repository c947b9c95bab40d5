package schedulertest

import (
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
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

// The fake tracker's watches are channels of watch.DefaultChanSize (100)
// events, and it panics ("channel full") when one more comes. A drained
// watch (below) empties them as fast as they fill, but on a busy machine
// (CI runs packages side by side on two cores) the scheduler's 64 binders
// still wrote more than 100 before its goroutine ran. Set before any test
// runs, so that no watch is made while it changes.
func init() { watch.DefaultChanSize = 1 << 15 }

// InstallBinding makes c's pods/binding subresource bind pods, and c's
// watches drain the fake tracker's as fast as it fills them.
func InstallBinding(c *fake.Clientset) *Binder {
	b := &Binder{}
	tracker := c.Tracker()
	// A watch of the fake tracker holds 100 events and panics when one
	// more comes ("channel full"): the scheduler's 64 binders outran an
	// informer on a busy machine. Each watch is moved at once into a
	// queue of its own.
	c.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := action.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := tracker.Watch(action.GetResource(), action.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		return true, drained(w), nil
	})
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

// drainedWatch reads its source as fast as it fills, and hands the events
// on from a queue without bound.
type drainedWatch struct {
	src  watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func drained(src watch.Interface) watch.Interface {
	d := &drainedWatch{src: src, out: make(chan watch.Event), stop: make(chan struct{})}
	in := make(chan []watch.Event, 1)
	go func() {
		defer close(in)
		var queue []watch.Event
		for {
			var send chan []watch.Event
			if len(queue) > 0 {
				send = in
			}
			select {
			case ev, ok := <-src.ResultChan():
				if !ok {
					if len(queue) > 0 {
						select {
						case in <- queue:
						case <-d.stop:
						}
					}
					return
				}
				queue = append(queue, ev)
			case send <- queue:
				queue = nil
			case <-d.stop:
				return
			}
		}
	}()
	go func() {
		defer close(d.out)
		for batch := range in {
			for _, ev := range batch {
				select {
				case d.out <- ev:
				case <-d.stop:
					return
				}
			}
		}
	}()
	return d
}

func (d *drainedWatch) ResultChan() <-chan watch.Event { return d.out }

func (d *drainedWatch) Stop() {
	d.once.Do(func() {
		close(d.stop)
		d.src.Stop()
	})
}
