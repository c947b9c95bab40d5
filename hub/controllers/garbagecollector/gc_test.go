package garbagecollector

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/metadata/metadatainformer"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api"
)

var (
	deployments = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	replicasets = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
	pods        = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
)

type env struct {
	t       *testing.T
	client  *fake.FakeMetadataClient
	factory metadatainformer.SharedInformerFactory
	gc      *Collector
}

func obj(apiVersion, kind, name string, uid types.UID, owners ...metav1.OwnerReference) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: apiVersion, Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: uid, OwnerReferences: owners},
	}
}

func owner(kind, name string, uid types.UID, block bool) metav1.OwnerReference {
	av := "apps/v1"
	if kind == "Pod" {
		av = "v1"
	}
	return metav1.OwnerReference{APIVersion: av, Kind: kind, Name: name, UID: uid, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(block)}
}

func deleting(o *metav1.PartialObjectMetadata, finalizer string) *metav1.PartialObjectMetadata {
	o.DeletionTimestamp = ptr.To(metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	o.Finalizers = []string{finalizer}
	return o
}

func newEnv(t *testing.T, objs ...runtime.Object) *env {
	t.Helper()
	scheme := fake.NewTestScheme()
	for _, gvk := range []schema.GroupVersionKind{
		{Group: "apps", Version: "v1", Kind: "Deployment"}, {Group: "apps", Version: "v1", Kind: "ReplicaSet"}, {Version: "v1", Kind: "Pod"},
	} {
		scheme.AddKnownTypeWithName(gvk, &metav1.PartialObjectMetadata{})
		scheme.AddKnownTypeWithName(gvk.GroupVersion().WithKind(gvk.Kind+"List"), &metav1.PartialObjectMetadataList{})
	}
	client := fake.NewSimpleMetadataClient(scheme, objs...)
	factory := metadatainformer.NewSharedInformerFactory(client, 0)
	var res []*api.Resource
	for _, gvr := range []schema.GroupVersionResource{deployments, replicasets, pods} {
		r, _ := api.ResourceFor(gvr)
		res = append(res, r)
	}
	gc, err := New(client, factory, Options{Resources: res})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, client: client, factory: factory, gc: gc}
	e.refresh()
	return e
}

var ctx = context.Background() // tests here need no cancellation

// refresh makes the caches show what the API holds.
func (e *env) refresh() {
	e.t.Helper()
	for gvr, inf := range e.gc.informers {
		l, err := e.client.Resource(gvr).Namespace("").List(ctx, metav1.ListOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		var items []any
		for i := range l.Items {
			items = append(items, &l.Items[i])
		}
		if err := inf.GetIndexer().Replace(items, ""); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) get(gvr schema.GroupVersionResource, name string) *metav1.PartialObjectMetadata {
	o, err := e.client.Resource(gvr).Namespace("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return o
}

func (e *env) deletes() map[string]metav1.DeletionPropagation {
	out := map[string]metav1.DeletionPropagation{}
	for _, a := range e.client.Actions() {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok {
			out[d.GetName()] = ptr.Deref(d.DeleteOptions.PropagationPolicy, "")
		}
	}
	return out
}

func key(gvr schema.GroupVersionResource, name string) string {
	return ref{gvr: gvr, namespace: "default", name: name}.key()
}

func TestBackground(t *testing.T) {
	rs := obj("apps/v1", "ReplicaSet", "alive", "rs-alive")
	orphaned := obj("v1", "Pod", "orphaned", "p1", owner("ReplicaSet", "gone", "rs-gone", true))
	shared := obj("v1", "Pod", "shared", "p2", owner("ReplicaSet", "gone", "rs-gone", true), owner("ReplicaSet", "alive", "rs-alive", false))
	e := newEnv(t, rs, orphaned, shared)

	for _, k := range []string{key(pods, "orphaned"), key(pods, "shared")} {
		if err := e.gc.attemptToDelete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.deletes(); len(got) != 1 || got["orphaned"] != metav1.DeletePropagationBackground {
		t.Fatalf("deletes %v, want only orphaned (Background)", got)
	}
	p := e.get(pods, "shared")
	if p == nil || len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != "rs-alive" {
		t.Fatalf("shared pod %+v: want only the living owner's reference left", p)
	}
}

// The cache has not seen the owner yet: the live read saves the dependent.
func TestOwnerMissingFromCacheOnly(t *testing.T) {
	rs := obj("apps/v1", "ReplicaSet", "new", "rs-new")
	pod := obj("v1", "Pod", "p", "p1", owner("ReplicaSet", "new", "rs-new", true))
	e := newEnv(t, pod)
	if err := e.client.Tracker().Add(rs); err != nil {
		t.Fatal(err)
	}
	if err := e.gc.attemptToDelete(ctx, key(pods, "p")); err != nil {
		t.Fatal(err)
	}
	if got := e.deletes(); len(got) != 0 {
		t.Fatalf("deleted %v although the owner exists", got)
	}
}

// A recreated owner (same name, new UID) does not own the old dependents.
func TestRecreatedOwnerIsNotTheOwner(t *testing.T) {
	rs := obj("apps/v1", "ReplicaSet", "web", "rs-v2")
	pod := obj("v1", "Pod", "p", "p1", owner("ReplicaSet", "web", "rs-v1", true))
	e := newEnv(t, rs, pod)
	if err := e.gc.attemptToDelete(ctx, key(pods, "p")); err != nil {
		t.Fatal(err)
	}
	if got := e.deletes(); got["p"] != metav1.DeletePropagationBackground {
		t.Fatalf("deletes %v, want p deleted", got)
	}
}

func TestOrphan(t *testing.T) {
	d := deleting(obj("apps/v1", "Deployment", "web", "d1"), FinalizerOrphan)
	rs1 := obj("apps/v1", "ReplicaSet", "web-a", "rs1", owner("Deployment", "web", "d1", true))
	rs2 := obj("apps/v1", "ReplicaSet", "web-b", "rs2", owner("Deployment", "web", "d1", true))
	e := newEnv(t, d, rs1, rs2)
	if err := e.gc.attemptToOrphan(ctx, key(deployments, "web")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"web-a", "web-b"} {
		if rs := e.get(replicasets, n); rs == nil || len(rs.OwnerReferences) != 0 {
			t.Fatalf("%s: %+v, want it kept without ownerReferences", n, rs)
		}
	}
	if got := e.get(deployments, "web"); got == nil || len(got.Finalizers) != 0 {
		t.Fatalf("deployment finalizers %v, want none left", got.Finalizers)
	}
	if got := e.deletes(); len(got) != 0 {
		t.Fatalf("deleted %v while orphaning", got)
	}
}

func TestForeground(t *testing.T) {
	d := deleting(obj("apps/v1", "Deployment", "web", "d1"), FinalizerForeground)
	rs := obj("apps/v1", "ReplicaSet", "web-a", "rs1", owner("Deployment", "web", "d1", true))
	pod := obj("v1", "Pod", "web-a-1", "p1", owner("ReplicaSet", "web-a", "rs1", true))
	e := newEnv(t, d, rs, pod)

	// The owner waits: its blocking dependent still exists.
	if err := e.gc.attemptToDelete(ctx, key(deployments, "web")); err != nil {
		t.Fatal(err)
	}
	if got := e.get(deployments, "web"); len(got.Finalizers) != 1 {
		t.Fatalf("finalizer removed while a blocking dependent exists: %v", got.Finalizers)
	}
	// The dependent has dependents of its own: it goes in the foreground.
	if err := e.gc.attemptToDelete(ctx, key(replicasets, "web-a")); err != nil {
		t.Fatal(err)
	}
	if got := e.deletes(); got["web-a"] != metav1.DeletePropagationForeground {
		t.Fatalf("deletes %v, want web-a in the Foreground", got)
	}
	// The fake deleted it outright; once the cache sees that, the owner
	// is free to go.
	e.refresh()
	if err := e.gc.attemptToDelete(ctx, key(deployments, "web")); err != nil {
		t.Fatal(err)
	}
	if got := e.get(deployments, "web"); got == nil || len(got.Finalizers) != 0 {
		t.Fatalf("finalizers %v, want foregroundDeletion removed", got.Finalizers)
	}
}
