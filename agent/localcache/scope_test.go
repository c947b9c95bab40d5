package localcache

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/agent/hubclient/fromclientset"
	"flotilla.dev/flotilla/agent/localstore"
	"flotilla.dev/flotilla/api"
)

func slice(name, site string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", ResourceVersion: "3",
		Labels: map[string]string{api.LabelServiceName: "web"}}, AddressType: discoveryv1.AddressTypeIPv4}
	if site != "-" {
		s.Labels[api.LabelSite] = site
	}
	return s
}

// names lists the slices the informer of f holds, sorted.
func names(f *hubclient.Informers) []string {
	var out []string
	for _, o := range f.EndpointSlices().Informer.GetStore().List() {
		out = append(out, o.(*discoveryv1.EndpointSlice).Name)
	}
	sort.Strings(out)
	return out
}

func waitFor(t *testing.T, f *hubclient.Informers, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := names(f)
		if s := join(got); s == want {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("the informer holds %s, want %s", s, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func join(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ","
		}
		out += s
	}
	return out
}

// scoped starts a factory whose EndpointSlices are those of site shop-a.
func scoped(t *testing.T, client *fake.Clientset, store *localstore.Store) *hubclient.Informers {
	t.Helper()
	f := hubclient.NewInformers(fromclientset.New(client))
	sel, err := api.SiteSelector("shop-a")
	if err != nil {
		t.Fatal(err)
	}
	f.Scope(&discoveryv1.EndpointSlice{}, sel.String())
	if err := Install(f, fromclientset.New(client), store, quiet); err != nil {
		t.Fatal(err)
	}
	_ = f.EndpointSlices()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.Start(ctx.Done())
	return f
}

// TestScopeTakesOnlyTheSitesSlices: a device of shop-a lists and keeps
// shop-a's and the fleet-wide slices only. A store listed with another
// scope (before sites, or on another site) is not resumed from: the hub
// lists again, and the store then holds what the new scope takes.
func TestScopeTakesOnlyTheSitesSlices(t *testing.T) {
	store, err := localstore.Open(filepath.Join(t.TempDir(), "state.db"), localstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	objs := []runtime.Object{slice("a", "shop-a"), slice("b", "shop-b"), slice("none", ""), slice("fleet", api.SiteFleet)}

	// Unscoped first, as an agent from before sites: every slice.
	start(t, fake.NewClientset(objs...), store)
	if got, _ := localstore.List[discoveryv1.EndpointSlice](store, localstore.EndpointSlices); len(got) != 4 {
		t.Fatalf("the unscoped store holds %d slices, want 4", len(got))
	}

	f := scoped(t, fake.NewClientset(objs...), store)
	waitFor(t, f, "a,fleet")
	got, _ := localstore.List[discoveryv1.EndpointSlice](store, localstore.EndpointSlices)
	if len(got) != 2 {
		t.Fatalf("the store holds %d slices after the scoped list, want 2", len(got))
	}
}

// TestOtherScopeServedWhileAwayThenListedAgain: with the hub away, the
// store's list of another scope keeps the device's rules as they were;
// once the hub answers, the informer lists again with the new scope.
func TestOtherScopeServedWhileAwayThenListedAgain(t *testing.T) {
	store, err := localstore.Open(filepath.Join(t.TempDir(), "state.db"), localstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	objs := []runtime.Object{slice("a", "shop-a"), slice("b", "shop-b"), slice("old", "-")}
	start(t, fake.NewClientset(objs...), store)

	hub := fake.NewClientset(objs...)
	var away atomic.Bool
	away.Store(true)
	// As a dial fails: the reflector retries such a watch rather than
	// listing again, so only the cache can ask for the new list.
	refused := fmt.Errorf("dial tcp 192.0.2.1:6443: %w", syscall.ECONNREFUSED)
	hub.PrependReactor("list", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		if away.Load() {
			return true, nil, refused
		}
		return false, nil, nil
	})
	hub.PrependWatchReactor("endpointslices", func(k8stesting.Action) (bool, watch.Interface, error) {
		if away.Load() {
			return true, nil, refused
		}
		return false, nil, nil
	})
	f := scoped(t, hub, store)
	waitFor(t, f, "a,b,old")
	away.Store(false)
	waitFor(t, f, "a")
}
