package replicaset

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

type env struct {
	client  *fake.Clientset
	factory informers.SharedInformerFactory
	c       *Controller
	rec     *record.FakeRecorder
	clock   *clocktesting.FakeClock
}

// newEnv builds the controller on a fake clientset whose creates fill in
// generateName and a UID as the hub does. Informers are not started: tests
// put objects in the caches themselves, so they decide what the controller
// has "seen".
func newEnv(t *testing.T, objs ...runtime.Object) *env {
	t.Helper()
	client := fake.NewClientset(objs...)
	var n atomic.Int64
	client.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, ok := a.(k8stesting.CreateAction).GetObject().(metav1.Object)
		if !ok {
			return false, nil, nil
		}
		i := n.Add(1)
		if obj.GetName() == "" && obj.GetGenerateName() != "" {
			obj.SetName(fmt.Sprintf("%s%05d", obj.GetGenerateName(), i))
		}
		if obj.GetUID() == "" {
			obj.SetUID(types.UID(fmt.Sprintf("uid-%d", i)))
		}
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	rec := record.NewFakeRecorder(1000)
	clk := clocktesting.NewFakeClock(t0)
	c, err := New(client, factory, rec, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return &env{client: client, factory: factory, c: c, rec: rec, clock: clk}
}

func (e *env) addToCache(t *testing.T, objs ...runtime.Object) {
	t.Helper()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *appsv1.ReplicaSet:
			err = e.factory.Apps().V1().ReplicaSets().Informer().GetIndexer().Add(o)
		case *corev1.Pod:
			err = e.factory.Core().V1().Pods().Informer().GetIndexer().Add(o)
		default:
			t.Fatalf("unexpected %T", o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func (e *env) actions(verb, resource string) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range e.client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource && a.GetSubresource() == "" {
			out = append(out, a)
		}
	}
	return out
}

func (e *env) events() []string {
	var out []string
	for {
		select {
		case ev := <-e.rec.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func newRS(name string, replicas int32) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("rs-" + name), Generation: 1},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img@sha256:1"}}},
			},
		},
	}
}

// ownedPod is a pod of rs, scheduled to node (or not), in phase, Ready
// since readySince (zero: not ready).
func ownedPod(rs *appsv1.ReplicaSet, name, node string, phase corev1.PodPhase, readySince time.Time) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: rs.Namespace, UID: types.UID("pod-" + name),
			Labels:            map[string]string{"app": rs.Name},
			CreationTimestamp: metav1.NewTime(t0.Add(-2 * time.Hour)),
		},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: phase},
	}
	if rs.UID != "" {
		p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(rs, GVK)}
	}
	if !readySince.IsZero() {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(readySince)}}
	}
	return p
}

var ctx = context.Background() // for tests that need no cancellation
