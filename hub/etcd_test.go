package hub_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/hub/store/etcdstore/etcdtest"
)

// TestTwoHubsOnEtcd runs two hubs on one etcd, the second given a copy of
// the first's DATA_DIR/pki as the docs say: one admin kubeconfig works on
// both, a write on one is read and watched on the other, a stale write is
// refused on either, and the Secret etcd holds is sealed.
func TestTwoHubsOnEtcd(t *testing.T) {
	etcd := etcdtest.Start(t, t.TempDir())
	cfg := hubtest.Options{Store: hub.StoreEtcd, Etcd: hub.EtcdConfig{Endpoints: []string{etcd.URL}}}
	a := hubtest.Start(t, cfg)
	cfg.DataDir = t.TempDir()
	if err := os.CopyFS(filepath.Join(cfg.DataDir, "pki"), os.DirFS(filepath.Join(a.DataDir, "pki"))); err != nil {
		t.Fatal(err)
	}
	b := hubtest.Start(t, cfg)
	ctx := context.Background()

	// A's admin credentials on B's address: one CA, one admin.
	onB := *a.Config
	onB.Host = b.Config.Host
	bClient, err := kubernetes.NewForConfig(&onB)
	if err != nil {
		t.Fatal(err)
	}

	w, err := bClient.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=settings"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cm, err := a.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"mode": "kiosk"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		got, ok := ev.Object.(*corev1.ConfigMap)
		if ev.Type != watch.Added || !ok || got.ResourceVersion != cm.ResourceVersion || got.Data["mode"] != "kiosk" {
			t.Fatalf("hub B watched %s %+v, want the ConfigMap hub A created at %s", ev.Type, ev.Object, cm.ResourceVersion)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("hub B's watch saw nothing of hub A's write")
	}
	got, err := bClient.CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{})
	if err != nil || got.Data["mode"] != "kiosk" {
		t.Fatalf("hub B reads %v, %v", got, err)
	}
	got.Data["mode"] = "till"
	if _, err := bClient.CoreV1().ConfigMaps("default").Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm.Data["mode"] = "stale"
	if _, err := a.Client.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "modified") {
		t.Fatalf("a stale update through hub A: %v, want a conflict", err)
	}

	if _, err := b.Client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "token"}, StringData: map[string]string{"token": "s3cret-value"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := a.Client.CoreV1().Secrets("default").Get(ctx, "token", metav1.GetOptions{})
	if err != nil || string(s.Data["token"]) != "s3cret-value" {
		t.Fatalf("hub A reads the Secret hub B wrote: %v, %v", s, err)
	}
	raw, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.URL}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	resp, err := raw.Get(ctx, "/flotilla/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	sawSecret := false
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Key), "secrets") && strings.Contains(string(kv.Key), "token") {
			sawSecret = true
		}
		if strings.Contains(string(kv.Value), "s3cret-value") || strings.Contains(string(kv.Value), "czNjcmV0LXZhbHVl") {
			t.Fatalf("etcd holds the Secret in the clear under %s", kv.Key)
		}
	}
	if !sawSecret {
		t.Fatalf("no Secret key under /flotilla/ in etcd (%d keys)", len(resp.Kvs))
	}
}
