package agent

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/agent/hubclient/fromclientset"
	"flotilla.dev/flotilla/agent/localstore"
	"flotilla.dev/flotilla/api"
)

// TestSiteOfTheDevice: the site comes from the Node as stored (no wait for
// the hub), from the hub when nothing is stored (a device that just
// joined), and is none when neither answers.
func TestSiteOfTheDevice(t *testing.T) {
	open := func() *localstore.Store { return openStore(t) }
	a := &Agent{cfg: Config{NodeName: "kiosk-1"}}
	ctx := context.Background()

	hub := fromclientset.New(fake.NewClientset(siteNode("shop-b", "9")))
	stored := open()
	if err := localstore.Put(stored, localstore.Nodes, siteNode("shop-a", "7")); err != nil {
		t.Fatal(err)
	}
	if got, rv := a.site(ctx, hub, stored); got != "shop-a" || rv != 7 {
		t.Errorf("with a stored Node: site %q at %d, want the stored shop-a at 7", got, rv)
	}
	if got, rv := a.site(ctx, hub, open()); got != "shop-b" || rv != 9 {
		t.Errorf("with nothing stored: site %q at %d, want the hub's shop-b at 9", got, rv)
	}
	away := fake.NewClientset()
	away.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if got, _ := a.site(ctx, fromclientset.New(away), open()); got != "" {
		t.Errorf("with neither: site %q, want none", got)
	}
}

func siteNode(zone, rv string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kiosk-1", ResourceVersion: rv, Labels: map[string]string{api.LabelZone: zone}}}
}

func openStore(t *testing.T) *localstore.Store {
	t.Helper()
	s, err := localstore.Open(filepath.Join(t.TempDir(), "state.db"), localstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSiteChangesOnlyWithANewerNode: a resumed watch replays the Node's
// versions since the stored resourceVersion, older ones on the old site
// among them; only a version newer than the one the site was read from
// moves the device (before, the agent went back and forth between the
// two sites, restarting each time).
func TestSiteChangesOnlyWithANewerNode(t *testing.T) {
	cs := fake.NewClientset(siteNode("demo-shop", "5"))
	shared := hubclient.NewInformers(fromclientset.New(cs))
	a := &Agent{cfg: Config{NodeName: "kiosk-1"}, log: slog.New(slog.DiscardHandler)}
	store := openStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.watchSite(ctx, shared, store, "back-office", 8) }()
	shared.Nodes() // registered before the informers start
	shared.Start(ctx.Done())
	if !shared.WaitForCacheSync(ctx.Done()) {
		t.Fatal("the Node informer did not sync")
	}
	nodes := cs.CoreV1().Nodes()
	if _, err := nodes.Update(ctx, siteNode("demo-shop", "6"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("versions 5 and 6 on the old site, older than the site's 8, moved the device: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := nodes.Update(ctx, siteNode("shop-c", "11"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrSiteChanged) {
			t.Fatalf("a newer Node on shop-c: %v, want ErrSiteChanged", err)
		}
	case <-ctx.Done():
		t.Fatal("a newer Node on another site did not move the device")
	}
	if n, ok, err := localstore.Get[corev1.Node](store, localstore.Nodes, "", "kiosk-1"); err != nil || !ok || api.SiteOf(n) != "shop-c" {
		t.Errorf("stored Node %v (%v, %v), want the one on shop-c for the next start", n, ok, err)
	}
}
