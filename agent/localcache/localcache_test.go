package localcache

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/agent/hubclient/fromclientset"
	"flotilla.dev/flotilla/agent/localstore"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func service(name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", ResourceVersion: "5"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.43.0.7"}}
}

// start runs the store-backed informers of a new factory and waits for
// them to sync.
func start(t *testing.T, client *fake.Clientset, store *localstore.Store) *hubclient.Informers {
	t.Helper()
	f := hubclient.NewInformers(fromclientset.New(client))
	if err := Install(f, fromclientset.New(client), store, quiet); err != nil {
		t.Fatal(err)
	}
	svcs := f.Services().Informer
	slices := f.EndpointSlices().Informer
	nodes := f.Nodes().Informer
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.Start(ctx.Done())
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if !cache.WaitForCacheSync(sctx.Done(), svcs.HasSynced, slices.HasSynced, nodes.HasSynced) {
		t.Fatal("the informers did not sync")
	}
	return f
}

func TestServesTheStoreWhenTheHubIsAway(t *testing.T) {
	store, err := localstore.Open(filepath.Join(t.TempDir(), "state.db"), localstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	// With the hub: its lists land in the store, and so do later events.
	hub := fake.NewClientset(service("web"), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dev1"}})
	start(t, hub, store)
	if _, err := hub.CoreV1().Services("shop").Create(context.Background(), service("db"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := localstore.List[corev1.Service](store, localstore.Services)
		if err == nil && len(got) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store holds %v (%v), want web and db", got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if rv, _ := store.ResourceVersion(localstore.Services); rv == "" {
		t.Error("no list resourceVersion recorded")
	}

	// Without the hub: every list and watch fails, and the informers
	// still sync, from the store.
	away := fake.NewClientset()
	down := errors.New("dial tcp: connection refused")
	away.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, down })
	away.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) { return true, nil, down })
	f := start(t, away, store)
	svcs, err := f.Services().Lister.List(everything())
	if err != nil || len(svcs) != 2 {
		t.Fatalf("services without the hub: %v %v, want web and db", svcs, err)
	}
	nodes, _ := f.Nodes().Lister.List(everything())
	if len(nodes) != 1 || nodes[0].Name != "dev1" {
		t.Errorf("nodes without the hub: %v", nodes)
	}
}

func TestFirstStartWithoutHubWaits(t *testing.T) {
	store, err := localstore.Open(filepath.Join(t.TempDir(), "state.db"), localstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	away := fake.NewClientset()
	away.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	f := hubclient.NewInformers(fromclientset.New(away))
	if err := Install(f, fromclientset.New(away), store, quiet); err != nil {
		t.Fatal(err)
	}
	inf := f.EndpointSlices().Informer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.Start(ctx.Done())
	time.Sleep(500 * time.Millisecond)
	// An empty store that never saw the hub is no answer: an informer
	// synced on it would make the proxy drop rules it should keep.
	if inf.HasSynced() {
		t.Error("synced on a store that never held a list from the hub")
	}
}

func everything() labels.Selector { return labels.Everything() }

// TestHubBehindTheStoreIsListed checks that a hub whose version is behind
// the stored one (restored from a backup, or moved to another store) is
// listed instead of watched from the stored version, which it would accept
// and send nothing up to: a Service the restored hub has and the store
// does not appears, and one only the store has goes.
func TestHubBehindTheStoreIsListed(t *testing.T) {
	store, err := localstore.Open(filepath.Join(t.TempDir(), "state.db"), localstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, k := range []localstore.Kind{localstore.Services, localstore.EndpointSlices, localstore.Nodes} {
		if err := store.SetResourceVersion(k, "900"); err != nil {
			t.Fatal(err)
		}
	}
	if err := localstore.Put(store, localstore.Services, service("old")); err != nil {
		t.Fatal(err)
	}
	restored := fake.NewClientset(service("web"))
	var watchedFrom900 bool
	restored.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if a.(k8stesting.WatchActionImpl).WatchRestrictions.ResourceVersion == "900" {
			watchedFrom900 = true
		}
		return false, nil, nil
	})
	f := start(t, restored, store)
	deadline := time.Now().Add(10 * time.Second)
	for {
		svcs, _ := f.Services().Lister.List(everything())
		if len(svcs) == 1 && svcs[0].Name == "web" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("services %v, want only the restored hub's web", svcs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if watchedFrom900 {
		t.Error("watched the hub from the stored version 900, which it has not reached")
	}
}
