package apiserver

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub/store/boltstore"
)

var (
	podRes, _   = api.ResourceForKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	sliceRes, _ = api.ResourceForKind(discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"))
)

func putObject(t *testing.T, st *boltstore.Store, res *api.Resource, obj runtime.Object, update bool) {
	t.Helper()
	m, _ := obj.(metav1.Object)
	data, err := encodeObject(res, obj)
	if err != nil {
		t.Fatal(err)
	}
	key := objectKey(res, m.GetNamespace(), m.GetName())
	if update {
		cur, err := st.Get(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.Update(context.Background(), key, data, cur.ModRevision)
	} else {
		_, err = st.Create(context.Background(), key, data)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// received drains what w was offered within a short wait: object names.
func received(w *cacheWatcher) []string {
	var out []string
	for {
		select {
		case ev := <-events(w):
			out = append(out, ev.cur.obj.(metav1.Object).GetName())
		case <-time.After(200 * time.Millisecond):
			return out
		}
	}
}

// TestWatchersOfOneDeviceAreOfferedOnlyItsPods: a watcher pinned to a
// node by its field selector is offered the events of that node's pods
// (a binding included, when the pod moves from no node to it) and no
// other; a watcher without the selector is offered all of them.
func TestWatchersOfOneDeviceAreOfferedOnlyItsPods(t *testing.T) {
	c, st := newTestCache(t, 100, 100)
	sub := func(f *filter) *cacheWatcher {
		w, _, _, err := c.subscribe(podRes, c.revision(), false, f, nil)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	devA := sub(&filter{fields: fields.OneTermEqualSelector("spec.nodeName", "dev-a")})
	devB := sub(&filter{fields: fields.OneTermEqualSelector("spec.nodeName", "dev-b")})
	all := sub(&filter{})
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{NodeName: node}}
	}
	putObject(t, st, podRes, pod("on-a", "dev-a"), false)
	putObject(t, st, podRes, pod("on-b", "dev-b"), false)
	putObject(t, st, podRes, pod("pending", ""), false)
	putObject(t, st, podRes, pod("pending", "dev-a"), true) // bound

	if got := fmt.Sprint(received(devA)); got != "[on-a pending]" {
		t.Errorf("dev-a's watcher was offered %s, want [on-a pending] (the binding)", got)
	}
	if got := fmt.Sprint(received(devB)); got != "[on-b]" {
		t.Errorf("dev-b's watcher was offered %s, want [on-b]", got)
	}
	if got := fmt.Sprint(received(all)); got != "[on-a on-b pending pending]" {
		t.Errorf("the unfiltered watcher was offered %s, want every event", got)
	}

	// Gone watchers leave no index entry behind.
	c.unsubscribe(devA)
	c.unsubscribe(devB)
	c.mu.RLock()
	filed := len(c.watchers[podRes].filed)
	c.mu.RUnlock()
	if filed != 0 {
		t.Errorf("%d index values left after the watchers left", filed)
	}
}

// TestSiteWatchersAreOfferedTheirSiteAndTheFleet: a device's slice watch
// (its site or the fleet-wide ones) is offered those slices once each,
// also when a slice moves between the two.
func TestSiteWatchersAreOfferedTheirSiteAndTheFleet(t *testing.T) {
	c, st := newTestCache(t, 100, 100)
	sel, err := api.SiteSelector("shop-a")
	if err != nil {
		t.Fatal(err)
	}
	w, _, _, err := c.subscribe(sliceRes, c.revision(), false, &filter{labels: sel}, nil)
	if err != nil {
		t.Fatal(err)
	}
	slice := func(name, site string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
			Labels: map[string]string{api.LabelSite: site}}, AddressType: discoveryv1.AddressTypeIPv4}
	}
	putObject(t, st, sliceRes, slice("a", "shop-a"), false)
	putObject(t, st, sliceRes, slice("b", "shop-b"), false)
	putObject(t, st, sliceRes, slice("f", api.SiteFleet), false)
	putObject(t, st, sliceRes, slice("f", "shop-a"), true)
	putObject(t, st, sliceRes, slice("b", "shop-a"), true)
	if got := fmt.Sprint(received(w)); got != "[a f f b]" {
		t.Errorf("the shop-a watcher was offered %s, want [a f f b]", got)
	}
}

// TestResumeBacklogAcrossTheRing: a watch resuming from a revision is
// given exactly the events of its resource after it, wherever that
// revision falls in a ring that has wrapped around; one from before the
// window is refused.
func TestResumeBacklogAcrossTheRing(t *testing.T) {
	c, st := newTestCache(t, 8, 100)
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	}
	type written struct {
		rev int64
		pod bool
	}
	var all []written
	for i := range 13 {
		if i%3 == 0 {
			putConfigMap(t, st, fmt.Sprintf("cm-%d", i))
		} else {
			putObject(t, st, podRes, pod(fmt.Sprintf("p-%d", i)), false)
		}
		all = append(all, written{pod: i%3 != 0})
	}
	cur, err := st.Get(context.Background(), objectKey(podRes, "default", "p-11"))
	if err != nil {
		t.Fatal(err)
	}
	last := cur.ModRevision + 1 // cm-12 came after p-11
	if err := c.waitFor(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	for i := range all {
		all[i].rev = last - int64(len(all)-1-i)
	}
	c.mu.RLock()
	oldest := c.oldest
	c.mu.RUnlock()
	for from := oldest; from <= last; from++ {
		_, backlog, _, err := c.subscribe(podRes, from, false, &filter{}, nil)
		if err != nil {
			t.Fatalf("resuming from %d (oldest %d): %v", from, oldest, err)
		}
		var got, want []int64
		for _, ev := range backlog {
			got = append(got, ev.rev)
		}
		for _, w := range all {
			if w.pod && w.rev > from {
				want = append(want, w.rev)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("resuming from %d: backlog %v, want %v", from, got, want)
		}
	}
	if _, _, _, err := c.subscribe(podRes, oldest-1, false, &filter{}, nil); !errors.Is(err, errTooOld) {
		t.Errorf("resuming from before the window (%d < %d): %v, want errTooOld", oldest-1, oldest, err)
	}
}
