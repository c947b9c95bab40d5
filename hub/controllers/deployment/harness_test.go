package deployment

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// world is a Deployment controller on a fake API whose ReplicaSet side is
// simulated: step() plays the ReplicaSet loop and the devices, making each
// ReplicaSet's pods exist at once and become Ready when the test says so.
type world struct {
	t       *testing.T
	client  *fake.Clientset
	factory informers.SharedInformerFactory
	c       *Controller
	rec     *record.FakeRecorder
	clock   *clocktesting.FakeClock
	// ready caps the ready pods of a ReplicaSet by name; absent means all
	// of its pods are Ready.
	ready map[string]int32
}

func newWorld(t *testing.T, objs ...runtime.Object) *world {
	t.Helper()
	client := fake.NewClientset(objs...)
	var n atomic.Int64
	client.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, ok := a.(k8stesting.CreateAction).GetObject().(metav1.Object)
		if !ok {
			return false, nil, nil
		}
		i := n.Add(1)
		if obj.GetUID() == "" {
			obj.SetUID(types.UID(fmt.Sprintf("uid-%d", i)))
		}
		// Creation order must be visible to the "oldest first" rules.
		obj.SetCreationTimestamp(metav1.NewTime(t0.Add(time.Duration(i) * time.Second)))
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	rec := record.NewFakeRecorder(1000)
	clk := clocktesting.NewFakeClock(t0)
	c, err := New(client, factory, rec, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, client: client, factory: factory, c: c, rec: rec, clock: clk, ready: map[string]int32{}}
	w.refresh()
	return w
}

var ctx = context.Background() // tests here need no cancellation

// refresh makes the informer caches show exactly what the API holds: the
// watch has caught up.
func (w *world) refresh() {
	w.t.Helper()
	ds, err := w.client.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	var dObjs []any
	for i := range ds.Items {
		dObjs = append(dObjs, &ds.Items[i])
	}
	rss, err := w.client.AppsV1().ReplicaSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	var rsObjs []any
	for i := range rss.Items {
		rsObjs = append(rsObjs, &rss.Items[i])
	}
	if err := w.factory.Apps().V1().Deployments().Informer().GetIndexer().Replace(dObjs, ""); err != nil {
		w.t.Fatal(err)
	}
	if err := w.factory.Apps().V1().ReplicaSets().Informer().GetIndexer().Replace(rsObjs, ""); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) sync(name string) {
	w.t.Helper()
	w.refresh()
	if err := w.c.sync(ctx, "default/"+name); err != nil {
		w.t.Fatalf("sync: %v", err)
	}
	w.refresh()
}

// step plays the ReplicaSet loop: pods appear or go at once, and are Ready
// (and, minReadySeconds being 0, available) up to the test's cap.
func (w *world) step() {
	w.t.Helper()
	rss, err := w.client.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	for i := range rss.Items {
		rs := &rss.Items[i]
		n := ptr.Deref(rs.Spec.Replicas, 0)
		ready := n
		if c, ok := w.ready[rs.Spec.Template.Labels["version"]]; ok {
			ready = min(n, c)
		}
		rs.Status = appsv1.ReplicaSetStatus{Replicas: n, FullyLabeledReplicas: n, ReadyReplicas: ready, AvailableReplicas: ready, ObservedGeneration: rs.Generation}
		if _, err := w.client.AppsV1().ReplicaSets("default").UpdateStatus(ctx, rs, metav1.UpdateOptions{}); err != nil {
			w.t.Fatal(err)
		}
	}
	w.refresh()
}

func (w *world) deployment(name string) *appsv1.Deployment {
	w.t.Helper()
	d, err := w.client.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	return d
}

// rsByVersion returns the ReplicaSets by their template's version label.
func (w *world) rsByVersion() map[string]*appsv1.ReplicaSet {
	w.t.Helper()
	rss, err := w.client.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]*appsv1.ReplicaSet{}
	for i := range rss.Items {
		out[rss.Items[i].Spec.Template.Labels["version"]] = &rss.Items[i]
	}
	return out
}

func (w *world) setTemplate(name, version string) {
	w.t.Helper()
	d := w.deployment(name)
	d.Spec.Template.Labels["version"] = version
	d.Spec.Template.Spec.Containers[0].Image = "shop/app:" + version
	d.Generation++
	if _, err := w.client.AppsV1().Deployments("default").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) events() []string {
	var out []string
	for {
		select {
		case ev := <-w.rec.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func newDeployment(name string, replicas int32, surge, unavailable intstr.IntOrString) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("d-" + name), Generation: 1},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name, "version": "v1"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "shop/app:v1"}}},
			},
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge, MaxUnavailable: &unavailable},
			},
			RevisionHistoryLimit:    ptr.To[int32](10),
			ProgressDeadlineSeconds: ptr.To[int32](600),
		},
	}
}

func condition(d *appsv1.Deployment, t appsv1.DeploymentConditionType) string {
	c := getCondition(d.Status, t)
	if c == nil {
		return "<none>"
	}
	return string(c.Status) + "/" + c.Reason
}

func sortedNames(rss map[string]*appsv1.ReplicaSet) []string {
	var out []string
	for _, rs := range rss {
		out = append(out, rs.Name)
	}
	sort.Strings(out)
	return out
}
