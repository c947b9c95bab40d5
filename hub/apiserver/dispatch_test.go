package apiserver

import (
	"context"
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
		case ev := <-w.ch:
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
		w, _, _, err := c.subscribe(podRes, c.revision(), false, f)
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
	w, _, _, err := c.subscribe(sliceRes, c.revision(), false, &filter{labels: sel})
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
