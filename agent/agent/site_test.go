package agent

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"flotilla.dev/flotilla/agent/hubclient/fromclientset"
	"flotilla.dev/flotilla/agent/localstore"
	"flotilla.dev/flotilla/api"
)

// TestSiteOfTheDevice: the site comes from the Node as stored (no wait for
// the hub), from the hub when nothing is stored (a device that just
// joined), and is none when neither answers.
func TestSiteOfTheDevice(t *testing.T) {
	node := func(zone string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kiosk-1", Labels: map[string]string{api.LabelZone: zone}}}
	}
	open := func() *localstore.Store {
		s, err := localstore.Open(filepath.Join(t.TempDir(), "state.db"), localstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a := &Agent{cfg: Config{NodeName: "kiosk-1"}}
	ctx := context.Background()

	hub := fromclientset.New(fake.NewClientset(node("shop-b")))
	stored := open()
	if err := localstore.Put(stored, localstore.Nodes, node("shop-a")); err != nil {
		t.Fatal(err)
	}
	if got := a.site(ctx, hub, stored); got != "shop-a" {
		t.Errorf("with a stored Node: site %q, want the stored shop-a", got)
	}
	if got := a.site(ctx, hub, open()); got != "shop-b" {
		t.Errorf("with nothing stored: site %q, want the hub's shop-b", got)
	}
	away := fake.NewClientset()
	away.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if got := a.site(ctx, fromclientset.New(away), open()); got != "" {
		t.Errorf("with neither: site %q, want none", got)
	}
}
