package replicaset

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub/controllers/controllerutil"
)

func TestCreatesPodsOnceUntilObserved(t *testing.T) {
	rs := newRS("web", 3)
	e := newEnv(t, rs)
	e.addToCache(t, rs)

	if err := e.c.sync(ctx, "default/web"); err != nil {
		t.Fatal(err)
	}
	creates := e.actions("create", "pods")
	if len(creates) != 3 {
		t.Fatalf("got %d pod creations, want 3", len(creates))
	}
	for _, a := range creates {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		ref := metav1.GetControllerOf(p)
		if ref == nil || ref.UID != rs.UID || ref.Kind != "ReplicaSet" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
			t.Errorf("pod %s: controller ref %+v, want ReplicaSet %s with blockOwnerDeletion", p.Name, ref, rs.UID)
		}
		if p.GenerateName != "web-" || p.Labels["app"] != "web" {
			t.Errorf("pod %s: generateName %q labels %v", p.Name, p.GenerateName, p.Labels)
		}
	}
	if ev := e.events(); len(ev) != 3 || !strings.HasPrefix(ev[0], "Normal SuccessfulCreate Created pod: web-") {
		t.Errorf("events %q, want 3 SuccessfulCreate", ev)
	}

	// The watch is slow: the cache still has no pods. A second sync must
	// not create again.
	if err := e.c.sync(ctx, "default/web"); err != nil {
		t.Fatal(err)
	}
	if n := len(e.actions("create", "pods")); n != 3 {
		t.Fatalf("second sync before the watch caught up: %d creations in all, want 3", n)
	}

	// The watch delivers two of three: still waiting.
	pods, _ := e.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	for i := range pods.Items[:2] {
		e.addToCache(t, &pods.Items[i])
		e.c.podEvents.Handler().OnAdd(&pods.Items[i], false)
	}
	if e.c.exp.Satisfied("default/web") {
		t.Fatal("expectations satisfied after 2 of 3 creations were observed")
	}
	e.addToCache(t, &pods.Items[2])
	e.c.podEvents.Handler().OnAdd(&pods.Items[2], false)
	if !e.c.exp.Satisfied("default/web") {
		t.Fatal("expectations not satisfied after all creations were observed")
	}
	if err := e.c.sync(ctx, "default/web"); err != nil {
		t.Fatal(err)
	}
	if n := len(e.actions("create", "pods")); n != 3 {
		t.Fatalf("%d creations in all, want 3", n)
	}
	got, _ := e.client.AppsV1().ReplicaSets("default").Get(ctx, "web", metav1.GetOptions{})
	if got.Status.Replicas != 3 || got.Status.FullyLabeledReplicas != 3 || got.Status.ObservedGeneration != 1 {
		t.Errorf("status %+v, want replicas 3 fullyLabeled 3 observedGeneration 1", got.Status)
	}
}

func TestExpectationsExpire(t *testing.T) {
	rs := newRS("web", 2)
	e := newEnv(t, rs)
	e.addToCache(t, rs)
	if err := e.c.sync(ctx, "default/web"); err != nil {
		t.Fatal(err)
	}
	// The creations are never observed (a lost event): after the timeout
	// the controller trusts its cache again.
	e.clock.Step(controllerutil.ExpectationsTimeout + time.Second)
	if err := e.c.sync(ctx, "default/web"); err != nil {
		t.Fatal(err)
	}
	if n := len(e.actions("create", "pods")); n != 4 {
		t.Fatalf("%d creations, want 4 after the expectation expired", n)
	}
}

func TestScaleDownOrder(t *testing.T) {
	rs := newRS("web", 1)
	pods := []*corev1.Pod{
		ownedPod(rs, "ready-old", "n1", corev1.PodRunning, t0.Add(-time.Hour)),
		ownedPod(rs, "ready-new", "n2", corev1.PodRunning, t0.Add(-10*time.Second)),
		ownedPod(rs, "not-ready", "n3", corev1.PodRunning, time.Time{}),
		ownedPod(rs, "pending", "n4", corev1.PodPending, time.Time{}),
		ownedPod(rs, "unscheduled", "", corev1.PodPending, time.Time{}),
	}
	objs := []runtime.Object{rs}
	for _, p := range pods {
		objs = append(objs, p)
	}
	e := newEnv(t, objs...)
	e.addToCache(t, objs...)
	e.clock.SetTime(t0)

	// Pick the 4 to delete and check the order through the deletion events.
	victims := PodsToDelete(pods, pods, 4, t0)
	var names []string
	for _, p := range victims {
		names = append(names, p.Name)
	}
	want := []string{"unscheduled", "pending", "not-ready", "ready-new"}
	if !slices.Equal(names, want) {
		t.Fatalf("deletion order %v, want %v", names, want)
	}

	if err := e.c.sync(ctx, "default/web"); err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, a := range e.actions("delete", "pods") {
		deleted = append(deleted, a.(k8stesting.DeleteAction).GetName())
	}
	slices.Sort(deleted)
	slices.Sort(want)
	if !slices.Equal(deleted, want) {
		t.Fatalf("deleted %v, want %v", deleted, want)
	}
	if _, del := e.c.exp.Pending("default/web"); del != 4 {
		t.Fatalf("%d deletions expected, want 4", del)
	}
	// A graceful deletion (deletionTimestamp) counts as observed, and the
	// later removal does not count twice.
	p := pods[2].DeepCopy()
	p.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	e.c.podEvents.Handler().OnUpdate(pods[2], p)
	e.c.podEvents.Handler().OnDelete(p)
	if _, del := e.c.exp.Pending("default/web"); del != 3 {
		t.Fatalf("%d deletions expected after one was observed, want 3", del)
	}
	for _, ev := range e.events() {
		if !strings.HasPrefix(ev, "Normal SuccessfulDelete Deleted pod: ") {
			t.Errorf("unexpected event %q", ev)
		}
	}
}

func TestDoubledUpPodsGoFirst(t *testing.T) {
	rs := newRS("web", 1)
	// Same readiness and age; a and b share node n1.
	a := ownedPod(rs, "a", "n1", corev1.PodRunning, t0.Add(-time.Hour))
	b := ownedPod(rs, "b", "n1", corev1.PodRunning, t0.Add(-time.Hour))
	c := ownedPod(rs, "c", "n2", corev1.PodRunning, t0.Add(-time.Hour))
	got := PodsToDelete([]*corev1.Pod{c, a, b}, []*corev1.Pod{a, b, c}, 1, t0)
	if got[0].Name == "c" {
		t.Fatalf("deleted the pod alone on its node; want one of the doubled-up pair")
	}
	// Deletion cost overrides the spreading.
	c.Annotations = map[string]string{AnnotationPodDeletionCost: "-10"}
	got = PodsToDelete([]*corev1.Pod{a, b, c}, []*corev1.Pod{a, b, c}, 1, t0)
	if got[0].Name != "c" {
		t.Fatalf("deleted %s, want c (lowest deletion cost)", got[0].Name)
	}
}

func TestAdoptAndRelease(t *testing.T) {
	rs := newRS("web", 2)
	orphan := ownedPod(&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}}, "orphan", "n1", corev1.PodRunning, t0)
	strayed := ownedPod(rs, "strayed", "n1", corev1.PodRunning, t0)
	strayed.Labels = map[string]string{"app": "debug"}
	kept := ownedPod(rs, "kept", "n1", corev1.PodRunning, t0)
	e := newEnv(t, rs, orphan, strayed, kept)
	e.addToCache(t, rs, orphan, strayed, kept)

	if err := e.c.sync(ctx, "default/web"); err != nil {
		t.Fatal(err)
	}
	got, _ := e.client.CoreV1().Pods("default").Get(ctx, "orphan", metav1.GetOptions{})
	if ref := metav1.GetControllerOf(got); ref == nil || ref.UID != rs.UID {
		t.Errorf("orphan not adopted: ownerReferences %+v", got.OwnerReferences)
	}
	got, _ = e.client.CoreV1().Pods("default").Get(ctx, "strayed", metav1.GetOptions{})
	if len(got.OwnerReferences) != 0 {
		t.Errorf("pod whose labels no longer match kept ownerReferences %+v", got.OwnerReferences)
	}
	// orphan + kept make 2: nothing to create or delete.
	if n := len(e.actions("create", "pods")) + len(e.actions("delete", "pods")); n != 0 {
		t.Errorf("%d creations/deletions, want none", n)
	}
}

// TestMirrorPodsAreNeverClaimed: a device's mirror pods may match a
// ReplicaSet's selector; they are neither adopted nor counted, and the
// ReplicaSet makes its own replicas (the issue 17 takeover: fakes adopted,
// real replicas never made or deleted).
func TestMirrorPodsAreNeverClaimed(t *testing.T) {
	rs := newRS("web", 2)
	mirrorOf := func(p *corev1.Pod) *corev1.Pod {
		p.Annotations = map[string]string{api.AnnotationMirrorPod: "hash", AnnotationPodDeletionCost: "2147483647"}
		return p
	}
	orphan := mirrorOf(ownedPod(&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}}, "fake-evil", "evil", corev1.PodRunning, t0.Add(-time.Hour)))
	orphan.OwnerReferences = nil
	// One that was adopted before the hub refused it keeps its reference
	// but is not counted either.
	adopted := mirrorOf(ownedPod(rs, "old-fake-evil", "evil", corev1.PodRunning, t0.Add(-time.Hour)))
	e := newEnv(t, rs, orphan, adopted)
	e.addToCache(t, rs, orphan, adopted)
	if err := e.c.sync(ctx, "default/web"); err != nil {
		t.Fatal(err)
	}
	if n := len(e.actions("patch", "pods")); n != 0 {
		t.Errorf("%d pod patches (adoptions or releases), want none", n)
	}
	if n := len(e.actions("delete", "pods")); n != 0 {
		t.Errorf("%d pod deletions, want none", n)
	}
	if n := len(e.actions("create", "pods")); n != 2 {
		t.Errorf("%d pods created, want the 2 replicas", n)
	}
}

func TestNoAdoptionWhileBeingDeleted(t *testing.T) {
	rs := newRS("web", 1)
	cached := rs.DeepCopy()
	rs.DeletionTimestamp = ptr.To(metav1.NewTime(t0)) // the API knows; the cache not yet
	orphan := ownedPod(&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}}, "orphan", "n1", corev1.PodRunning, t0)
	e := newEnv(t, rs, orphan)
	e.addToCache(t, cached, orphan)
	err := e.c.sync(ctx, "default/web")
	if err == nil || !strings.Contains(err.Error(), "being deleted") {
		t.Fatalf("sync error %v, want refusal to adopt for a ReplicaSet being deleted", err)
	}
	if n := len(e.actions("patch", "pods")) + len(e.actions("create", "pods")); n != 0 {
		t.Fatalf("%d patches/creations, want none", n)
	}
}

func TestStatusAvailabilityWaitsMinReadySeconds(t *testing.T) {
	rs := newRS("web", 2)
	rs.Spec.MinReadySeconds = 10
	a := ownedPod(rs, "a", "n1", corev1.PodRunning, t0.Add(-5*time.Second))
	b := ownedPod(rs, "b", "n2", corev1.PodRunning, t0.Add(-5*time.Second))
	e := newEnv(t, rs, a, b)
	e.addToCache(t, rs, a, b)
	if err := e.c.sync(ctx, "default/web"); err != nil {
		t.Fatal(err)
	}
	got, _ := e.client.AppsV1().ReplicaSets("default").Get(ctx, "web", metav1.GetOptions{})
	if got.Status.ReadyReplicas != 2 || got.Status.AvailableReplicas != 0 {
		t.Fatalf("status %+v, want ready 2 available 0 before minReadySeconds", got.Status)
	}
	e.addToCache(t, got)
	e.clock.Step(6 * time.Second)
	if err := e.c.sync(ctx, "default/web"); err != nil {
		t.Fatal(err)
	}
	got, _ = e.client.AppsV1().ReplicaSets("default").Get(ctx, "web", metav1.GetOptions{})
	if got.Status.AvailableReplicas != 2 {
		t.Fatalf("status %+v, want available 2 after minReadySeconds", got.Status)
	}
}

func TestFailedCreateSetsConditionAndLowersExpectations(t *testing.T) {
	rs := newRS("web", 5)
	e := newEnv(t, rs)
	e.addToCache(t, rs)
	e.client.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("quota exceeded")
	})
	err := e.c.sync(ctx, "default/web")
	if err == nil {
		t.Fatal("sync succeeded although every creation failed")
	}
	// Slow start: one attempt, not five.
	if n := len(e.actions("create", "pods")); n != 1 {
		t.Fatalf("%d creation attempts, want 1 (slow start)", n)
	}
	if !e.c.exp.Satisfied("default/web") {
		t.Fatal("expectations still wait for creations that failed")
	}
	if ev := e.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning FailedCreate Error creating: ") {
		t.Fatalf("events %q, want one Warning FailedCreate", ev)
	}
	got, _ := e.client.AppsV1().ReplicaSets("default").Get(ctx, "web", metav1.GetOptions{})
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != appsv1.ReplicaSetReplicaFailure || got.Status.Conditions[0].Reason != "FailedCreate" {
		t.Fatalf("conditions %+v, want ReplicaFailure/FailedCreate", got.Status.Conditions)
	}
}

// TestLoop runs the real loop on informers: a deleted pod is replaced and
// a scale-down removes the surplus.
func TestLoop(t *testing.T) {
	rs := newRS("web", 3)
	e := newEnv(t, rs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.c.Run(ctx, 2) }()
	e.factory.Start(ctx.Done())
	defer func() { cancel(); <-done; e.factory.Shutdown() }()

	pods := func() []corev1.Pod {
		l, err := e.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	waitFor(t, "3 pods", func() bool { return len(pods()) == 3 })
	victim := pods()[0].Name
	if err := e.client.CoreV1().Pods("default").Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a replacement", func() bool {
		ps := pods()
		return len(ps) == 3 && !slices.ContainsFunc(ps, func(p corev1.Pod) bool { return p.Name == victim })
	})
	// Expectations: one creation per missing pod, never a double.
	if n := len(e.actions("create", "pods")); n != 4 {
		t.Errorf("%d creations, want 4 (3 + 1 replacement)", n)
	}
	// The fake clientset has no status subresource: a status write of the
	// loop's cached copy can put the old spec back, so the scale is
	// re-applied until it sticks (the hub keeps spec and status apart).
	scale := func() {
		cur, _ := e.client.AppsV1().ReplicaSets("default").Get(ctx, "web", metav1.GetOptions{})
		if cur.Spec.Replicas != nil && *cur.Spec.Replicas == 1 {
			return
		}
		cur.Spec.Replicas = ptr.To[int32](1)
		if _, err := e.client.AppsV1().ReplicaSets("default").Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "scale-down to 1", func() bool { scale(); return len(pods()) == 1 })
	waitFor(t, "status replicas 1", func() bool {
		cur, _ := e.client.AppsV1().ReplicaSets("default").Get(ctx, "web", metav1.GetOptions{})
		return cur.Status.Replicas == 1
	})
}

// waitFor polls cond until it holds; the deadline only guards against a
// hang and is not a measurement.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
