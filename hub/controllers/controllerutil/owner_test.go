package controllerutil

import (
	"context"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/internal/controlloop"
)

// ownerFixture is an OwnerEvents for ReplicaSets and their pods over a map
// standing in for the informer cache.
type ownerFixture struct {
	h    *OwnerEvents[*appsv1.ReplicaSet, *corev1.Pod]
	loop *controlloop.Loop
	rss  map[string]*appsv1.ReplicaSet
	exp  *Expectations
}

func newOwnerFixture(t *testing.T, rss ...*appsv1.ReplicaSet) *ownerFixture {
	t.Helper()
	f := &ownerFixture{
		loop: controlloop.New("test", func(context.Context, string) error { return nil }, controlloop.Options{}),
		rss:  map[string]*appsv1.ReplicaSet{},
		exp:  NewExpectations(nil),
	}
	t.Cleanup(f.loop.Queue().ShutDown)
	for _, rs := range rss {
		f.rss[controlloop.ObjectKey(rs)] = rs
	}
	f.h = &OwnerEvents[*appsv1.ReplicaSet, *corev1.Pod]{
		Kind: "ReplicaSet",
		Get: func(ns, name string) (*appsv1.ReplicaSet, error) {
			if rs, ok := f.rss[ns+"/"+name]; ok {
				return rs, nil
			}
			return nil, apierrors.NewNotFound(appsv1.Resource("replicasets"), name)
		},
		Matching: func(p *corev1.Pod) ([]*appsv1.ReplicaSet, error) {
			var out []*appsv1.ReplicaSet
			for _, rs := range f.rss {
				sel, _ := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
				if rs.Namespace == p.Namespace && sel.Matches(labels.Set(p.Labels)) {
					out = append(out, rs)
				}
			}
			return out, nil
		},
		Loop:                 f.loop,
		Expectations:         f.exp,
		TerminatingIsDeleted: true,
	}
	return f
}

// queued drains the queue and returns its keys, sorted.
func (f *ownerFixture) queued() []string {
	var keys []string
	for f.loop.Queue().Len() > 0 {
		k, _ := f.loop.Queue().Get()
		f.loop.Queue().Done(k)
		f.loop.Queue().Forget(k)
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func ownerRS(name string, uid types.UID, app string) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid},
		Spec:       appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
	}
}

func ownedPod(name, app string, owner *appsv1.ReplicaSet) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"app": app}}}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, rsGVK)}
	}
	return p
}

func TestOwnerEventsAddWakesTheControllerOrTheAdopters(t *testing.T) {
	web := ownerRS("web", "web-uid", "web")
	web2 := ownerRS("web2", "web2-uid", "web")
	db := ownerRS("db", "db-uid", "db")
	f := newOwnerFixture(t, web, web2, db)
	handler := f.h.Handler()

	f.exp.ExpectCreations("ns/web", 1)
	handler.OnAdd(ownedPod("p1", "web", web), false)
	if got := f.queued(); !slices.Equal(got, []string{"ns/web"}) {
		t.Errorf("owned pod added: queued %v, want [ns/web]", got)
	}
	if !f.exp.Satisfied("ns/web") {
		t.Error("the owned pod's creation was not counted as observed")
	}

	handler.OnAdd(ownedPod("orphan", "web", nil), false)
	if got := f.queued(); !slices.Equal(got, []string{"ns/web", "ns/web2"}) {
		t.Errorf("orphan added: queued %v, want both ReplicaSets that may adopt it", got)
	}

	// A controllerRef to a ReplicaSet since recreated (new UID) names no
	// owner, and the pod is not an orphan either: nothing is woken.
	stale := ownedPod("stale", "web", ownerRS("web", "old-uid", "web"))
	handler.OnAdd(stale, false)
	if got := f.queued(); len(got) != 0 {
		t.Errorf("pod of a recreated owner added: queued %v, want nothing", got)
	}
}

func TestOwnerEventsUpdate(t *testing.T) {
	web := ownerRS("web", "web-uid", "web")
	db := ownerRS("db", "db-uid", "db")
	f := newOwnerFixture(t, web, db)
	handler := f.h.Handler()

	// Released by web, labels changed to db's: web learns it lost the
	// pod, db that it may adopt it.
	old := ownedPod("p", "web", web)
	cur := ownedPod("p", "db", nil)
	handler.OnUpdate(old, cur)
	if got := f.queued(); !slices.Equal(got, []string{"ns/db", "ns/web"}) {
		t.Errorf("released and relabelled: queued %v, want [ns/db ns/web]", got)
	}

	// A terminating pod counts as deleted at once.
	f.exp.ExpectDeletions("ns/web", []string{"ns/p"})
	old = ownedPod("p", "web", web)
	cur = ownedPod("p", "web", web)
	cur.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	handler.OnUpdate(old, cur)
	if got := f.queued(); !slices.Equal(got, []string{"ns/web"}) {
		t.Errorf("terminating: queued %v, want [ns/web]", got)
	}
	if !f.exp.Satisfied("ns/web") {
		t.Error("the start of a graceful deletion was not counted as the deletion")
	}

	// Without TerminatingIsDeleted, it is an update like any other: the
	// deletion is counted only when the object goes.
	f.h.TerminatingIsDeleted = false
	f.exp.ExpectDeletions("ns/web", []string{"ns/p"})
	handler.OnUpdate(old, cur)
	if f.exp.Satisfied("ns/web") {
		t.Error("TerminatingIsDeleted off, yet a terminating update counted as the deletion")
	}
	if got := f.queued(); !slices.Equal(got, []string{"ns/web"}) {
		t.Errorf("terminating, TerminatingIsDeleted off: queued %v, want [ns/web]", got)
	}
}

func TestOwnerEventsRecheck(t *testing.T) {
	web := ownerRS("web", "web-uid", "web")
	f := newOwnerFixture(t, web)
	var asked []string
	f.h.Recheck = func(owner *appsv1.ReplicaSet, old, cur *corev1.Pod) time.Duration {
		asked = append(asked, owner.Name+":"+cur.Name)
		return time.Millisecond
	}
	f.h.Handler().OnUpdate(ownedPod("p", "web", web), ownedPod("p", "web", web))
	if !slices.Equal(asked, []string{"web:p"}) {
		t.Fatalf("Recheck asked for %v, want [web:p]", asked)
	}
	f.queued() // the immediate enqueue
	deadline := time.Now().Add(5 * time.Second)
	for f.loop.Queue().Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the owner was not enqueued again after Recheck's delay")
		}
		time.Sleep(time.Millisecond)
	}
	if got := f.queued(); !slices.Equal(got, []string{"ns/web"}) {
		t.Errorf("after the delay: queued %v, want [ns/web]", got)
	}
}

func TestOwnerEventsDeleteUnwrapsTombstones(t *testing.T) {
	web := ownerRS("web", "web-uid", "web")
	f := newOwnerFixture(t, web)
	f.exp.ExpectDeletions("ns/web", []string{"ns/p"})
	f.h.Handler().OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: ownedPod("p", "web", web)})
	if got := f.queued(); !slices.Equal(got, []string{"ns/web"}) {
		t.Errorf("tombstone: queued %v, want [ns/web]", got)
	}
	if !f.exp.Satisfied("ns/web") {
		t.Error("the deletion behind a tombstone was not counted")
	}
	f.h.Handler().OnDelete(ownedPod("orphan", "web", nil))
	if got := f.queued(); len(got) != 0 {
		t.Errorf("orphan deleted: queued %v, want nothing (no owner to tell)", got)
	}
}

func TestAvailableAfter(t *testing.T) {
	notReady := &corev1.Pod{}
	ready := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	for _, tc := range []struct {
		name     string
		old, cur *corev1.Pod
		minReady int32
		want     time.Duration
	}{
		{"became ready", notReady, ready, 10, 11 * time.Second},
		{"became ready, no minReadySeconds", notReady, ready, 0, 0},
		{"stayed ready", ready, ready, 10, 0},
		{"stayed not ready", notReady, notReady, 10, 0},
		{"lost readiness", ready, notReady, 10, 0},
	} {
		if got := AvailableAfter(tc.old, tc.cur, tc.minReady); got != tc.want {
			t.Errorf("%s: AvailableAfter = %v, want %v", tc.name, got, tc.want)
		}
	}
}
