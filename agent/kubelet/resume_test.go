package kubelet

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"flotilla.dev/flotilla/agent/hubclient/fromclientset"
	"flotilla.dev/flotilla/agent/localstore"
	"flotilla.dev/flotilla/api"
)

// hubCalls records the hub's pod lists and watches and answers the
// watches from the test.
type hubCalls struct {
	mu       sync.Mutex
	lists    int // whole lists
	probes   int // lists of one, asking for the hub's version
	watchRVs []string
	expire   bool   // answer a watch with 410
	hubRV    string // the hub's version, answered to a probe
	watcher  *watch.FakeWatcher
}

func (h *hubCalls) install(c *fake.Clientset) {
	c.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if a.(k8stesting.ListActionImpl).ListOptions.Limit == 1 {
			h.probes++
			return true, &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: h.hubRV}}, nil
		}
		h.lists++
		return false, nil, nil // the tracker answers
	})
	c.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.watchRVs = append(h.watchRVs, a.(k8stesting.WatchActionImpl).WatchRestrictions.ResourceVersion)
		if h.expire {
			h.expire = false
			return true, nil, apierrors.NewResourceExpired("too old resource version")
		}
		h.watcher = watch.NewFake()
		return true, h.watcher, nil
	})
}

func (h *hubCalls) snapshot() (int, []string, *watch.FakeWatcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lists, append([]string(nil), h.watchRVs...), h.watcher
}

func testPod(name, rv string, mirror bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID("uid-" + name), ResourceVersion: rv},
		Spec: corev1.PodSpec{NodeName: "dev1"}}
	if mirror {
		p.Annotations = map[string]string{api.AnnotationMirrorPod: "hash"}
	}
	return p
}

// TestHubSourceResumesFromTheStore checks that an agent starting with a
// whole list in its store does not list the hub again: the informer
// starts from the store, its watch resumes from the stored version (the
// version of the last event recorded), a pod deleted while the agent was
// away goes with the replayed event, and the hub source counts as synced
// only once the hub has answered. A version the hub no longer has (410)
// makes it list the hub.
func TestHubSourceResumesFromTheStore(t *testing.T) {
	for _, tc := range []struct {
		name   string
		hubRV  string // the hub's version when the agent starts
		expire bool   // the hub answers the resumed watch 410
	}{
		{"resumes", "8", false},
		{"410 lists the hub", "8", true},
		{"a hub behind the stored version is listed", "4", false},
	} {
		expired := tc.expire || tc.hubRV == "4"
		t.Run(tc.name, func(t *testing.T) {
			store := openStore(t)
			stored := []*corev1.Pod{testPod("web", "7", false), testPod("gone", "5", false), testPod("static-dev1", "6", true)}
			if err := localstore.Replace(store, localstore.Pods, stored, "7"); err != nil {
				t.Fatal(err)
			}
			if err := store.SetFact(factPodsWithMirrors, "true"); err != nil {
				t.Fatal(err)
			}
			// The hub still has web; gone was deleted while the agent was away.
			client := fake.NewClientset(testPod("web", "7", false), testPod("static-dev1", "6", true))
			calls := &hubCalls{expire: tc.expire, hubRV: tc.hubRV}
			calls.install(client)

			src := runHubSource(t, client, store)

			waitUntil(t, "the hub source syncs", src.HasSynced)
			lists, rvs, w := calls.snapshot()
			if tc.hubRV == "4" {
				// Never watched from 7: the hub is behind it.
				if len(rvs) > 0 && rvs[0] == "7" {
					t.Fatalf("watched from the stored 7 on a hub at 4: %q", rvs)
				}
			} else if len(rvs) == 0 || rvs[0] != "7" {
				t.Fatalf("the first watch asked for resourceVersion %q, want the stored 7", rvs)
			}
			if expired {
				if lists != 1 {
					t.Fatalf("after a refused version the hub was listed %d times, want 1", lists)
				}
				waitUntil(t, "the pod deleted meanwhile leaves the store", func() bool {
					_, ok, _ := localstore.Get[corev1.Pod](store, localstore.Pods, "shop", "gone")
					return !ok
				})
				return
			}
			if lists != 0 {
				t.Fatalf("the hub was listed %d times; a resumed start lists it never", lists)
			}
			if _, ok := src.Get("uid-web"); !ok {
				t.Fatal("the resumed source does not have web")
			}
			if _, ok := src.mirrorOf(testPod("static-dev1", "", false)); !ok {
				t.Fatal("the static pod's mirror, unchanged on the hub, is not known after the resume")
			}
			// The hub replays what happened after version 7.
			w.Delete(testPod("gone", "9", false))
			waitUntil(t, "the replayed deletion removes the pod", func() bool {
				_, ok, _ := localstore.Get[corev1.Pod](store, localstore.Pods, "shop", "gone")
				_, known := src.Get("uid-gone")
				return !ok && !known
			})
			if rv, _ := store.ResourceVersion(localstore.Pods); rv != "9" {
				t.Fatalf("the store resumes from %q after the deletion at 9, want 9", rv)
			}
		})
	}
}

// TestHubSourceHidesTheStoreUntilTheHubAnswers checks that while the hub
// is away the pods the store gave the informer are not offered as the
// hub's (the cache source serves them), and the source is not synced.
func TestHubSourceHidesTheStoreUntilTheHubAnswers(t *testing.T) {
	store := openStore(t)
	if err := localstore.Replace(store, localstore.Pods, []*corev1.Pod{testPod("web", "7", false)}, "7"); err != nil {
		t.Fatal(err)
	}
	if err := store.SetFact(factPodsWithMirrors, "true"); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, nil, apierrors.NewServiceUnavailable("the hub is away")
	})
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("the hub is away")
	})
	src := runHubSource(t, client, store)
	waitUntil(t, "the informer holds the stored list", src.informer.HasSynced)
	time.Sleep(200 * time.Millisecond)
	if src.HasSynced() {
		t.Fatal("the hub source counts as synced while the hub has not answered")
	}
	if _, ok := src.Get("uid-web"); ok || len(src.List()) != 0 {
		t.Fatal("the hub source offers the stored pods as the hub's while the hub is away")
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestObjectWatchResumesFromTheStore checks that a pod's ConfigMap kept
// in the store is not listed from the hub again after a restart: its
// watch resumes from the stored object's version, and a change made while
// the agent was away arrives as the replayed event.
func TestObjectWatchResumesFromTheStore(t *testing.T) {
	store := openStore(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "shop", ResourceVersion: "12"}, Data: map[string]string{"mode": "old"}}
	if err := localstore.Put(store, localstore.ConfigMaps, cm); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(cm)
	var (
		mu    sync.Mutex
		lists int
		rvs   []string
		w     = watch.NewFake()
	)
	client.PrependReactor("list", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.ListActionImpl).ListOptions.Limit == 1 {
			return true, &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "20"}}, nil
		}
		mu.Lock()
		lists++
		mu.Unlock()
		return false, nil, nil
	})
	client.PrependWatchReactor("configmaps", func(a k8stesting.Action) (bool, watch.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		rvs = append(rvs, a.(k8stesting.WatchActionImpl).WatchRestrictions.ResourceVersion)
		return true, w, nil
	})
	c := newObjectCache(fromclientset.New(client), func(types.UID) {})
	c.store, c.log = store, slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.start(ctx)
	c.setPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "uid-web"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}}}})
	got, err := c.ConfigMap(ctx, "shop", "settings")
	if err != nil || got.Data["mode"] != "old" {
		t.Fatalf("ConfigMap = %v, %v; want the stored one", got, err)
	}
	waitUntil(t, "the watch starts", func() bool { mu.Lock(); defer mu.Unlock(); return len(rvs) > 0 })
	mu.Lock()
	if lists != 0 || rvs[0] != "12" {
		t.Fatalf("lists %d, first watch from %q; want no list and a watch from the stored 12", lists, rvs[0])
	}
	mu.Unlock()
	changed := cm.DeepCopy()
	changed.ResourceVersion, changed.Data = "15", map[string]string{"mode": "new"}
	w.Modify(changed)
	waitUntil(t, "the replayed change reaches the store", func() bool {
		s, ok, _ := localstore.Get[corev1.ConfigMap](store, localstore.ConfigMaps, "shop", "settings")
		return ok && s.Data["mode"] == "new"
	})
}

// TestHubSourceListsAStoreWithoutMirrors checks that a store written by
// an agent that kept no mirror pods is not resumed from: the hub is
// listed, so the static pods' mirrors are known.
func TestHubSourceListsAStoreWithoutMirrors(t *testing.T) {
	store := openStore(t)
	if err := localstore.Replace(store, localstore.Pods, []*corev1.Pod{testPod("web", "7", false)}, "7"); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(testPod("web", "7", false), testPod("static-dev1", "6", true))
	calls := &hubCalls{}
	calls.install(client)
	src := runHubSource(t, client, store)
	waitUntil(t, "the hub source syncs", src.HasSynced)
	if lists, _, _ := calls.snapshot(); lists != 1 {
		t.Fatalf("the hub was listed %d times for a store without mirrors, want 1", lists)
	}
	if _, ok := src.mirrorOf(testPod("static-dev1", "", false)); !ok {
		t.Fatal("the static pod's mirror is not known")
	}
}

func openStore(t *testing.T) *localstore.Store {
	t.Helper()
	store, err := localstore.Open(filepath.Join(t.TempDir(), "state.db"), localstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// runHubSource runs a hub source of dev1 over client, recording in store,
// until the test ends.
func runHubSource(t *testing.T, client *fake.Clientset, store *localstore.Store) *HubSource {
	t.Helper()
	src := NewHubSource(fromclientset.New(client), "dev1")
	if err := src.persist(store, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = src.Run(ctx, func(types.UID) {}) }()
	return src
}
