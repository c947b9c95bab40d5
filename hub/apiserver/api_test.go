package apiserver_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/internal/testenv"
)

const testImage = "registry.local/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func pod(name string, lbls map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: testImage}}},
	}
}

func deployment(name string, replicas int32) *appsv1.Deployment {
	l := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: l},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: testImage}}},
			},
		},
	}
}

func TestCRUDWithTypedClient(t *testing.T) {
	h := hubtest.Start(t)
	c, cs := ctx(t), h.Client
	created, err := cs.CoreV1().Pods("default").Create(c, pod("a", map[string]string{"app": "x"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if created.UID == "" || created.ResourceVersion == "" || created.CreationTimestamp.IsZero() {
		t.Fatalf("create did not set uid/resourceVersion/creationTimestamp: %+v", created.ObjectMeta)
	}
	if created.Spec.RestartPolicy != corev1.RestartPolicyAlways || created.Spec.Containers[0].ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("defaults not applied: restartPolicy=%q pullPolicy=%q", created.Spec.RestartPolicy, created.Spec.Containers[0].ImagePullPolicy)
	}
	if created.Status.Phase != corev1.PodPending {
		t.Errorf("new pod phase = %q, want Pending", created.Status.Phase)
	}
	got, err := cs.CoreV1().Pods("default").Get(c, "a", metav1.GetOptions{})
	if err != nil || got.UID != created.UID {
		t.Fatalf("get: %v %v", err, got)
	}
	if _, err := cs.CoreV1().Pods("default").Create(c, pod("a", nil), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create: want AlreadyExists, got %v", err)
	}
	list, err := cs.CoreV1().Pods("default").List(c, metav1.ListOptions{LabelSelector: "app=x"})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("list by label: %v %d", err, len(list.Items))
	}
	list, err = cs.CoreV1().Pods("default").List(c, metav1.ListOptions{LabelSelector: "app=y"})
	if err != nil || len(list.Items) != 0 {
		t.Fatalf("list by other label: %v %d", err, len(list.Items))
	}
	if _, err := cs.CoreV1().Pods("default").Get(c, "missing", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get missing: want NotFound, got %v", err)
	}
	if _, err := cs.CoreV1().Pods("nowhere").Create(c, pod("b", nil), metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("create in a missing namespace: want NotFound, got %v", err)
	}
	gen, err := cs.CoreV1().Pods("").Create(c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "gen-", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: testImage}}}}, metav1.CreateOptions{})
	if err == nil {
		t.Errorf("create through the all-namespaces path must fail, got %s", gen.Name)
	}
	gen, err = cs.CoreV1().Pods("default").Create(c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "gen-"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: testImage}}}}, metav1.CreateOptions{})
	if err != nil || !strings.HasPrefix(gen.Name, "gen-") || len(gen.Name) != len("gen-")+5 {
		t.Errorf("generateName: %v %q", err, gen.Name)
	}
	if err := cs.CoreV1().Pods("default").Delete(c, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := cs.CoreV1().Pods("default").Get(c, "a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("unbound pod is deleted at once; get after delete: %v", err)
	}
}

func TestStaleUpdateIsConflict(t *testing.T) {
	h := hubtest.Start(t)
	c, cms := ctx(t), h.Client.CoreV1().ConfigMaps("default")
	cm, err := cms.Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"k": "1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := cm.DeepCopy()
	a.Data["k"] = "2"
	if _, err := cms.Update(c, a, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("first update: %v", err)
	}
	b := cm.DeepCopy()
	b.Data["k"] = "3"
	_, err = cms.Update(c, b, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Fatalf("stale update: want 409 Conflict, got %v", err)
	}
	got, _ := cms.Get(c, "cfg", metav1.GetOptions{})
	if got.Data["k"] != "2" {
		t.Errorf("the stale update changed the object: %v", got.Data)
	}
	// An update that changes nothing keeps the resourceVersion.
	same, err := cms.Update(c, got, metav1.UpdateOptions{})
	if err != nil || same.ResourceVersion != got.ResourceVersion {
		t.Errorf("no-op update: %v, rv %s -> %s", err, got.ResourceVersion, same.ResourceVersion)
	}
}

func TestInvalidObjectGets422WithCauses(t *testing.T) {
	h := hubtest.Start(t)
	c := ctx(t)
	bad := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "Bad_Name"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: testImage}, {Name: "a", Image: ""}}}}
	_, err := h.Client.CoreV1().Pods("default").Create(c, bad, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want 422 Invalid, got %v", err)
	}
	st := err.(apierrors.APIStatus).Status()
	if st.Code != 422 {
		t.Errorf("code %d, want 422", st.Code)
	}
	fields := map[string]bool{}
	for _, cause := range st.Details.Causes {
		fields[cause.Field] = true
	}
	for _, want := range []string{"metadata.name", "spec.containers[1].name", "spec.containers[1].image"} {
		if !fields[want] {
			t.Errorf("no cause for %s in %+v", want, st.Details.Causes)
		}
	}
	// Tag-only images are refused unless the hub allows them.
	tagged := pod("tagged", nil)
	tagged.Spec.Containers[0].Image = "nginx:1.27"
	_, err = h.Client.CoreV1().Pods("default").Create(c, tagged, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "digest") {
		t.Errorf("tag-only image: want 422 naming the digest, got %v", err)
	}
	// A selector that does not match the template's labels.
	d := deployment("web", 1)
	d.Spec.Template.Labels = map[string]string{"app": "other"}
	_, err = h.Client.AppsV1().Deployments("default").Create(c, d, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.template.metadata.labels") {
		t.Errorf("selector mismatch: want 422 on spec.template.metadata.labels, got %v", err)
	}
}

func TestStatusSubresourceAndGeneration(t *testing.T) {
	h := hubtest.Start(t)
	c, deps := ctx(t), h.Client.AppsV1().Deployments("default")
	d, err := deps.Create(c, deployment("web", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Generation != 1 {
		t.Errorf("generation after create = %d", d.Generation)
	}
	// The main resource ignores status.
	d.Status.Replicas = 5
	d.Labels = map[string]string{"touched": "yes"}
	d, err = deps.Update(c, d, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Status.Replicas != 0 || d.Generation != 1 {
		t.Errorf("update of the main resource changed status (%d) or bumped generation on a label change (%d)", d.Status.Replicas, d.Generation)
	}
	// The status subresource ignores everything else.
	d.Status.Replicas = 3
	d.Spec.Replicas = ptr(int32(7))
	d, err = deps.UpdateStatus(c, d, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Status.Replicas != 3 || *d.Spec.Replicas != 1 {
		t.Errorf("status update: status.replicas=%d spec.replicas=%d, want 3 and 1", d.Status.Replicas, *d.Spec.Replicas)
	}
	d.Spec.Replicas = ptr(int32(2))
	d, err = deps.Update(c, d, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Generation != 2 || d.Status.Replicas != 3 {
		t.Errorf("spec change: generation %d (want 2), status.replicas %d (want 3)", d.Generation, d.Status.Replicas)
	}
}

func ptr[T any](v T) *T { return &v }

func TestBindingAndGracefulDeletion(t *testing.T) {
	h := hubtest.Start(t)
	c, pods := ctx(t), h.Client.CoreV1().Pods("default")
	if _, err := pods.Create(c, pod("p", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind := func(node string) error {
		return pods.Bind(c, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}, metav1.CreateOptions{})
	}
	if err := bind("dev-1"); err != nil {
		t.Fatalf("bind: %v", err)
	}
	if err := bind("dev-2"); !apierrors.IsConflict(err) {
		t.Fatalf("second binding: want 409, got %v", err)
	}
	p, _ := pods.Get(c, "p", metav1.GetOptions{})
	if p.Spec.NodeName != "dev-1" {
		t.Fatalf("nodeName = %q", p.Spec.NodeName)
	}
	if !hasCondition(p, corev1.PodScheduled) {
		t.Errorf("bound pod has no PodScheduled=True condition: %+v", p.Status.Conditions)
	}
	list, err := pods.List(c, metav1.ListOptions{FieldSelector: "spec.nodeName=dev-1"})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("field selector spec.nodeName: %v %d", err, len(list.Items))
	}
	// A bound pod stays, marked, until its device confirms.
	if err := pods.Delete(c, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err = pods.Get(c, "p", metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp == nil || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds != 30 {
		t.Fatalf("graceful deletion: %v %+v", err, p.ObjectMeta)
	}
	if err := pods.Delete(c, "p", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Get(c, "p", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after the device confirmed: want NotFound, got %v", err)
	}
}

func hasCondition(p *corev1.Pod, typ corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func TestFinalizersHoldDeletion(t *testing.T) {
	h := hubtest.Start(t)
	c, cms := ctx(t), h.Client.CoreV1().ConfigMaps("default")
	_, err := cms.Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(c, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := cms.Get(c, "held", metav1.GetOptions{})
	if err != nil || cm.DeletionTimestamp == nil {
		t.Fatalf("object with a finalizer must stay, marked: %v %+v", err, cm)
	}
	cm.Finalizers = append(cm.Finalizers, "example.com/another")
	if _, err := cms.Update(c, cm, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("adding a finalizer during deletion: want 403, got %v", err)
	}
	cm, _ = cms.Get(c, "held", metav1.GetOptions{})
	cm.Finalizers = nil
	if _, err := cms.Update(c, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(c, "held", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("removing the last finalizer completes the deletion; got %v", err)
	}
	// Orphan propagation is recorded as the orphan finalizer.
	if _, err := h.Client.AppsV1().Deployments("default").Create(c, deployment("d", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	orphan := metav1.DeletePropagationOrphan
	if err := h.Client.AppsV1().Deployments("default").Delete(c, "d", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	d, err := h.Client.AppsV1().Deployments("default").Get(c, "d", metav1.GetOptions{})
	if err != nil || len(d.Finalizers) != 1 || d.Finalizers[0] != metav1.FinalizerOrphanDependents {
		t.Fatalf("orphan deletion: %v %+v", err, d)
	}
}

func TestPatchTypes(t *testing.T) {
	testenv.Integration(t, "several seconds")
	h := hubtest.Start(t)
	c, deps := ctx(t), h.Client.AppsV1().Deployments("default")
	if _, err := deps.Create(c, deployment("web", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Strategic merge: containers merge by name.
	smp := `{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","image":"` + testImage + `"}]}}}}`
	d, err := deps.Patch(c, "web", types.StrategicMergePatchType, []byte(smp), metav1.PatchOptions{})
	if err != nil || len(d.Spec.Template.Spec.Containers) != 2 {
		t.Fatalf("strategic merge patch: %v %v", err, d)
	}
	d, err = deps.Patch(c, "web", types.MergePatchType, []byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{})
	if err != nil || *d.Spec.Replicas != 4 {
		t.Fatalf("merge patch: %v", err)
	}
	d, err = deps.Patch(c, "web", types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/replicas","value":5}]`), metav1.PatchOptions{})
	if err != nil || *d.Spec.Replicas != 5 {
		t.Fatalf("json patch: %v", err)
	}
	_, err = deps.Patch(c, "web", types.JSONPatchType, []byte(`[{"op":"test","path":"/spec/replicas","value":1}]`), metav1.PatchOptions{})
	if !apierrors.IsBadRequest(err) && !apierrors.IsInvalid(err) {
		t.Errorf("failing json patch test op: want 400, got %v", err)
	}
	_, err = deps.Patch(c, "web", types.MergePatchType, []byte(`{"metadata":{"resourceVersion":"1"},"spec":{"replicas":6}}`), metav1.PatchOptions{})
	if !apierrors.IsConflict(err) {
		t.Errorf("patch with a stale resourceVersion: want 409, got %v", err)
	}
	d, err = deps.Patch(c, "web", types.MergePatchType, []byte(`{"status":{"replicas":9}}`), metav1.PatchOptions{}, "status")
	if err != nil || d.Status.Replicas != 9 {
		t.Errorf("status patch: %v %v", err, d)
	}
}

func TestWatchResumeAndGone(t *testing.T) {
	h := hubtest.Start(t)
	c, cms := ctx(t), h.Client.CoreV1().ConfigMaps("default")
	first, err := cms.Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "w0"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := cms.Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := cms.Watch(c, metav1.ListOptions{ResourceVersion: first.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		ev := next(t, w)
		if ev.Type != watch.Added || ev.Object.(*corev1.ConfigMap).Name != fmt.Sprintf("w%d", i) {
			t.Fatalf("resumed watch event %d: %s %v", i, ev.Type, ev.Object)
		}
	}
	if err := cms.Delete(c, "w2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w); ev.Type != watch.Deleted || ev.Object.(*corev1.ConfigMap).Name != "w2" {
		t.Fatalf("delete event: %s %v", ev.Type, ev.Object)
	}
	w.Stop()
	// A restarted hub replays its window from the store's history: a
	// watch from before the restart resumes with what happened since.
	h = h.Restart()
	w, err = h.Client.CoreV1().ConfigMaps("default").Watch(c, metav1.ListOptions{ResourceVersion: first.ResourceVersion})
	if err != nil {
		t.Fatalf("watch from revision %s, before the restart: %v", first.ResourceVersion, err)
	}
	defer w.Stop()
	for i, want := range []struct {
		typ  watch.EventType
		name string
	}{{watch.Added, "w1"}, {watch.Added, "w2"}, {watch.Added, "w3"}, {watch.Deleted, "w2"}} {
		if ev := next(t, w); ev.Type != want.typ || ev.Object.(*corev1.ConfigMap).Name != want.name {
			t.Fatalf("watch resumed after the restart, event %d: %s %v, want %s %s", i, ev.Type, ev.Object, want.typ, want.name)
		}
	}
	// (One from before the window is 410 Gone: TestWindowReplayedAtStart.)
}

func next(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event within 10s")
	}
	return watch.Event{}
}

func TestWatchWithSelectorSeesTransitions(t *testing.T) {
	h := hubtest.Start(t)
	c, pods := ctx(t), h.Client.CoreV1().Pods("default")
	w, err := pods.Watch(c, metav1.ListOptions{LabelSelector: "tier=front"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	p, err := pods.Create(c, pod("p", map[string]string{"tier": "back"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels["tier"] = "front"
	if p, err = pods.Update(c, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w); ev.Type != watch.Added {
		t.Fatalf("label now matches: want ADDED, got %s", ev.Type)
	}
	p.Labels["tier"] = "back"
	if _, err = pods.Update(c, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w); ev.Type != watch.Deleted {
		t.Fatalf("label no longer matches: want DELETED, got %s", ev.Type)
	}
}

func TestInformersSyncAndResyncAfterRestart(t *testing.T) {
	testenv.Integration(t, "restarts the hub")
	h := hubtest.Start(t)
	c := ctx(t)
	for i := 0; i < 5; i++ {
		if _, err := h.Client.CoreV1().ConfigMaps("default").Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]string{}
	record := func(kind string) func(any) {
		return func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			mu.Lock()
			seen[o.(*corev1.ConfigMap).Name] = kind
			mu.Unlock()
		}
	}
	run := func(cs kubernetes.Interface) (informers.SharedInformerFactory, context.CancelFunc) {
		f := informers.NewSharedInformerFactory(cs, 0)
		inf := f.Core().V1().ConfigMaps().Informer()
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    record("add"),
			UpdateFunc: func(_, o any) { record("update")(o) },
			DeleteFunc: record("delete"),
		})
		ictx, cancel := context.WithCancel(c)
		f.Start(ictx.Done())
		if !cache.WaitForCacheSync(ictx.Done(), inf.HasSynced) {
			t.Fatal("informer did not sync")
		}
		return f, cancel
	}
	f, cancel := run(h.Client)
	defer cancel()
	if n := len(mustList(t, f)); n != 5 {
		t.Fatalf("informer synced %d objects, want 5", n)
	}
	cm, _ := h.Client.CoreV1().ConfigMaps("default").Get(c, "cm0", metav1.GetOptions{})
	cm.Data = map[string]string{"a": "b"}
	if _, err := h.Client.CoreV1().ConfigMaps("default").Update(c, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.Client.CoreV1().ConfigMaps("default").Delete(c, "cm1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Client.CoreV1().ConfigMaps("default").Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm9"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen["cm0"] == "update" && seen["cm1"] == "delete" && seen["cm9"] == "add"
	})
	cancel()

	// After a restart (new port, same data), a new informer sees the same
	// state, and changes made after the restart.
	h2 := h.Restart()
	f2, cancel2 := run(h2.Client)
	defer cancel2()
	names := map[string]bool{}
	for _, o := range mustList(t, f2) {
		names[o.Name] = true
	}
	if len(names) != 5 || names["cm1"] || !names["cm9"] {
		t.Fatalf("after restart the informer has %v", names)
	}
	if _, err := h2.Client.CoreV1().ConfigMaps("default").Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen["after"] == "add"
	})
}

func mustList(t *testing.T, f informers.SharedInformerFactory) []*corev1.ConfigMap {
	l, err := f.Core().V1().ConfigMaps().Lister().List(labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 15s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// raw sends a request with the admin's credentials (or none).
func raw(t *testing.T, cfg *rest.Config, method, path, contentType string, body []byte, withCert bool) (int, metav1.Status, []byte) {
	t.Helper()
	tc, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !withCert {
		tc = &tls.Config{RootCAs: tc.RootCAs, MinVersion: tls.VersionTLS13}
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 30 * time.Second}
	req, _ := http.NewRequest(method, cfg.Host+path, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var st metav1.Status
	_ = json.Unmarshal(data, &st)
	return resp.StatusCode, st, data
}

func TestUnauthenticatedIs401(t *testing.T) {
	h := hubtest.Start(t)
	code, st, _ := raw(t, h.Config, "GET", "/api/v1/namespaces/default/pods", "", nil, false)
	if code != 401 || st.Reason != metav1.StatusReasonUnauthorized {
		t.Fatalf("no certificate: %d %+v", code, st)
	}
	if code, _, _ := raw(t, h.Config, "GET", "/healthz", "", nil, false); code != 200 {
		t.Errorf("/healthz without a certificate: %d", code)
	}
	if code, _, _ := raw(t, h.Config, "GET", "/metrics", "", nil, false); code != 401 {
		t.Errorf("/metrics without a certificate: %d", code)
	}
	code, _, body := raw(t, h.Config, "GET", "/metrics", "", nil, true)
	if code != 200 || !bytes.Contains(body, []byte("flotilla_apiserver_requests_total")) || !bytes.Contains(body, []byte("flotilla_store_commit_duration_seconds")) {
		t.Errorf("/metrics: %d, missing series", code)
	}
}

func TestBadBodies(t *testing.T) {
	h := hubtest.Start(t)
	path := "/api/v1/namespaces/default/configmaps"
	code, st, _ := raw(t, h.Config, "POST", path, "application/json", []byte(`{"kind":"ConfigMap",`), true)
	if code != 400 || st.Reason != metav1.StatusReasonBadRequest {
		t.Errorf("malformed JSON: %d %+v", code, st)
	}
	code, _, _ = raw(t, h.Config, "POST", path, "application/yaml", []byte("kind: ConfigMap\n  bad: [indent"), true)
	if code != 400 {
		t.Errorf("malformed YAML: %d", code)
	}
	code, st, _ = raw(t, h.Config, "POST", path, "application/yaml", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-yaml}\ndata: {a: b}\n"), true)
	if code != 201 {
		t.Errorf("YAML body: %d %s", code, st.Message)
	}
	code, st, _ = raw(t, h.Config, "POST", path+"?fieldValidation=Strict", "application/json", []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"s"},"dataa":{}}`), true)
	if code != 400 || !strings.Contains(st.Message, "dataa") {
		t.Errorf("unknown field under Strict: %d %s", code, st.Message)
	}
	// A ConfigMap whose data is over 1 MiB in a body well under the 3 MiB
	// body limit: kube-apiserver's validation refuses it (ValidateConfigMap:
	// 422 Invalid, Too long), before any storage limit is reached.
	big := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big"},"data":{"a":"` + strings.Repeat("x", 1<<20+10) + `"}}`
	code, st, _ = raw(t, h.Config, "POST", path, "application/json", []byte(big), true)
	if code != 422 || st.Reason != metav1.StatusReasonInvalid || st.Details == nil ||
		!slices.ContainsFunc(st.Details.Causes, func(c metav1.StatusCause) bool { return c.Type == metav1.CauseTypeTooLong }) {
		t.Errorf("ConfigMap data over 1 MiB: %d %s %+v, want 422 Invalid with a FieldValueTooLong cause", code, st.Reason, st.Details)
	}
	huge := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"huge"},"data":{"a":"` + strings.Repeat("x", 4<<20) + `"}}`
	code, _, _ = raw(t, h.Config, "POST", path, "application/json", []byte(huge), true)
	if code != 413 {
		t.Errorf("body over 3 MiB: %d, want 413", code)
	}
	code, _, _ = raw(t, h.Config, "POST", path, "application/json", []byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"wrongkind"}}`), true)
	if code != 400 {
		t.Errorf("kind mismatch: %d", code)
	}
}

func TestServiceIPsAreUniqueAndSurviveRestart(t *testing.T) {
	testenv.Integration(t, "restarts the hub")
	h := hubtest.Start(t)
	c := ctx(t)
	svc := func(name string, ip string, typ corev1.ServiceType) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
			Type: typ, ClusterIP: ip, Selector: map[string]string{"a": "b"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	}
	seen := map[string]bool{}
	for i := 0; i < 5; i++ {
		s, err := h.Client.CoreV1().Services("default").Create(c, svc(fmt.Sprintf("s%d", i), "", corev1.ServiceTypeNodePort), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if seen[s.Spec.ClusterIP] || !strings.HasPrefix(s.Spec.ClusterIP, "10.43.") {
			t.Fatalf("clusterIP %q duplicated or outside 10.43.0.0/16", s.Spec.ClusterIP)
		}
		seen[s.Spec.ClusterIP] = true
		if np := s.Spec.Ports[0].NodePort; np < 30000 || np > 32767 {
			t.Fatalf("nodePort %d outside the range", np)
		}
	}
	s0, _ := h.Client.CoreV1().Services("default").Get(c, "s0", metav1.GetOptions{})
	h2 := h.Restart()
	_, err := h2.Client.CoreV1().Services("default").Create(c, svc("dup", s0.Spec.ClusterIP, ""), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "already allocated") {
		t.Fatalf("requesting an allocated IP after a restart: want 422, got %v", err)
	}
	s, err := h2.Client.CoreV1().Services("default").Create(c, svc("asked", "10.43.200.7", ""), metav1.CreateOptions{})
	if err != nil || s.Spec.ClusterIP != "10.43.200.7" {
		t.Fatalf("requested free IP: %v", err)
	}
	if err := h2.Client.CoreV1().Services("default").Delete(c, "asked", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h2.Client.CoreV1().Services("default").Create(c, svc("again", "10.43.200.7", ""), metav1.CreateOptions{}); err != nil {
		t.Fatalf("an IP released on delete can be requested again: %v", err)
	}
}

func TestDiscoveryForKubectl(t *testing.T) {
	h := hubtest.Start(t)
	dc := h.Client.Discovery()
	groups, resources, err := dc.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, g := range groups {
		names[g.Name] = true
	}
	for _, g := range []string{"", "apps", "coordination.k8s.io", "discovery.k8s.io", "flotilla.dev"} {
		if !names[g] {
			t.Errorf("group %q not discovered", g)
		}
	}
	found := map[string]bool{}
	for _, rl := range resources {
		for _, r := range rl.APIResources {
			found[rl.GroupVersion+"/"+r.Name] = true
		}
	}
	for _, r := range []string{"v1/pods", "v1/pods/status", "v1/pods/binding", "apps/v1/deployments", "flotilla.dev/v1alpha1/gitsources", "discovery.k8s.io/v1/endpointslices"} {
		if !found[r] {
			t.Errorf("resource %s not discovered", r)
		}
	}
	v, err := dc.ServerVersion()
	if err != nil || v.Major != "1" {
		t.Errorf("version: %v %+v", err, v)
	}
}

func TestNamespaceDeletionEmptiesIt(t *testing.T) {
	testenv.Integration(t, "about 10 s: waits for the namespace controller")
	h := hubtest.Start(t)
	c := ctx(t)
	if _, err := h.Client.CoreV1().Namespaces().Create(c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Client.CoreV1().ConfigMaps("shop").Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.Client.CoreV1().Namespaces().Delete(c, "shop", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Client.CoreV1().ConfigMaps("shop").Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "y"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) && !apierrors.IsNotFound(err) {
		t.Errorf("create in a terminating namespace: want 403, got %v", err)
	}
	waitFor(t, func() bool {
		_, err := h.Client.CoreV1().Namespaces().Get(c, "shop", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if _, err := h.Client.CoreV1().ConfigMaps("shop").Get(c, "x", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("content of a deleted namespace survived: %v", err)
	}
	if err := h.Client.CoreV1().Namespaces().Delete(c, "default", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("deleting default: want 403, got %v", err)
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	h := hubtest.Start(t)
	c := ctx(t)
	_, err := h.Client.CoreV1().ConfigMaps("default").Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dry"}}, metav1.CreateOptions{DryRun: []string{"All"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Client.CoreV1().ConfigMaps("default").Get(c, "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("dry-run create stored the object: %v", err)
	}
	bad := pod("bad", nil)
	bad.Spec.Containers[0].Image = ""
	if _, err := h.Client.CoreV1().Pods("default").Create(c, bad, metav1.CreateOptions{DryRun: []string{"All"}}); !apierrors.IsInvalid(err) {
		t.Errorf("dry-run still validates: got %v", err)
	}
}
