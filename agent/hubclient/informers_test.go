package hubclient_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/agent/hubclient/fromclientset"
)

func TestInformersShareOnePerKind(t *testing.T) {
	client := fake.NewClientset(
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dev1"}},
	)
	f := hubclient.NewInformers(fromclientset.New(client))
	if f.Services().Informer != f.Services().Informer {
		t.Error("two Services informers")
	}
	slices := f.EndpointSlices()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f.Start(ctx.Done())
	// A kind asked for after Start runs from the next Start on.
	nodes := f.Nodes()
	f.Start(ctx.Done())
	if !f.WaitForCacheSync(ctx.Done()) {
		t.Fatal("the informers did not sync")
	}
	if !nodes.Informer.HasSynced() {
		t.Error("WaitForCacheSync returned before the Nodes informer synced")
	}
	if s, err := f.Services().Lister.Services("shop").Get("web"); err != nil || s.Name != "web" {
		t.Errorf("service: %v %v", s, err)
	}
	if l, err := slices.Lister.List(labels.Everything()); err != nil || len(l) != 1 {
		t.Errorf("endpoint slices: %v %v", l, err)
	}
	if n, err := nodes.Lister.Get("dev1"); err != nil || n.Name != "dev1" {
		t.Errorf("node: %v %v", n, err)
	}
}

func TestInformerForKeepsTheFirst(t *testing.T) {
	f := hubclient.NewInformers(fromclientset.New(fake.NewClientset()))
	mine := cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Node{}, 0, cache.Indexers{})
	if got := f.InformerFor(&corev1.Node{}, func() cache.SharedIndexInformer { return mine }); got != mine {
		t.Fatal("InformerFor did not register the new informer")
	}
	if f.Nodes().Informer != mine {
		t.Error("Nodes() replaced the informer registered before it")
	}
}
