package main

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/hub/store/etcdstore/etcdtest"
)

func runMigrate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"migrate"}, args...))
	err := root.Execute()
	return out.String(), err
}

// fleet is what the test puts in a hub and expects back after migrating:
// ConfigMaps by name in the order they were last written, and a Secret.
func fleetOf(t *testing.T, h *hubtest.Hub) (order []string, secret string) {
	t.Helper()
	ctx := context.Background()
	cms, err := h.Client.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(cms.Items, func(a, b corev1.ConfigMap) int {
		ra, _ := strconv.ParseInt(a.ResourceVersion, 10, 64)
		rb, _ := strconv.ParseInt(b.ResourceVersion, 10, 64)
		return int(ra - rb)
	})
	for _, cm := range cms.Items {
		if strings.HasPrefix(cm.Name, "cm-") {
			order = append(order, cm.Name+"="+cm.Data["v"])
		}
	}
	s, err := h.Client.CoreV1().Secrets("default").Get(ctx, "token", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return order, string(s.Data["token"])
}

// TestMigrateRoundTrip moves a hub's objects from bbolt to etcd and back:
// every object arrives, in the order it was written, Secrets still open
// with the hub's key; a store being served, and a target that is not
// empty, are refused.
func TestMigrateRoundTrip(t *testing.T) {
	ctx := context.Background()
	first := hubtest.Start(t)
	for i, name := range []string{"cm-a", "cm-b", "cm-c"} {
		if _, err := first.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": "1"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if _, err := first.Client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "token"}, StringData: map[string]string{"token": "s3cret"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// cm-a written last: order is by last write, not creation.
	cm, _ := first.Client.CoreV1().ConfigMaps("default").Get(ctx, "cm-a", metav1.GetOptions{})
	cm.Data["v"] = "2"
	if _, err := first.Client.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wantOrder, wantSecret := fleetOf(t, first)
	if strings.Join(wantOrder, " ") != "cm-b=1 cm-c=1 cm-a=2" {
		t.Fatalf("the source's order: %v", wantOrder)
	}

	etcd := etcdtest.Start(t, t.TempDir())
	if out, err := runMigrate(t, "--from", "bbolt:"+first.DataDir, "--to", "etcd:"+etcd.URL); err == nil || !strings.Contains(err.Error(), "stop it first") {
		t.Fatalf("migrating from a bbolt file a hub has open: %q, %v", out, err)
	}
	first.Stop()
	out, err := runMigrate(t, "--from", "bbolt:"+first.DataDir, "--to", "etcd:"+etcd.URL)
	if err != nil || !strings.HasPrefix(out, "copied ") {
		t.Fatalf("bbolt to etcd: %q, %v", out, err)
	}

	onEtcd := hubtest.Start(t, hubtest.Options{DataDir: first.PeerDataDir(), Store: hub.StoreEtcd, Etcd: hub.EtcdConfig{Endpoints: []string{etcd.URL}}})
	if order, secret := fleetOf(t, onEtcd); !slices.Equal(order, wantOrder) || secret != wantSecret {
		t.Fatalf("on etcd: %v %q, want %v %q", order, secret, wantOrder, wantSecret)
	}

	// Served: something writes while migrate watches.
	stop := make(chan struct{})
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			onEtcd.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "busy-" + strconv.Itoa(i)}}, metav1.CreateOptions{})
		}
	}()
	back := t.TempDir()
	out, err = runMigrate(t, "--from", "etcd:"+etcd.URL, "--to", "bbolt:"+back, "--quiet-period", "1s")
	close(stop)
	if err == nil || !strings.Contains(err.Error(), "a hub is serving it") {
		t.Fatalf("migrating from a served etcd: %q, %v", out, err)
	}
	onEtcd.Stop()

	back = first.PeerDataDir()
	if out, err := runMigrate(t, "--from", "etcd:"+etcd.URL, "--to", "bbolt:"+back, "--quiet-period", "1s"); err != nil {
		t.Fatalf("etcd to bbolt: %q, %v", out, err)
	}
	if out, err := runMigrate(t, "--from", "etcd:"+etcd.URL, "--to", "bbolt:"+back, "--quiet-period", "100ms"); err == nil || !strings.Contains(err.Error(), "already holds") {
		t.Fatalf("migrating into a store that is not empty: %q, %v", out, err)
	}
	again := hubtest.Start(t, hubtest.Options{DataDir: back})
	if order, secret := fleetOf(t, again); !slices.Equal(order, wantOrder) || secret != wantSecret {
		t.Fatalf("back on bbolt: %v %q, want %v %q", order, secret, wantOrder, wantSecret)
	}

	for _, bad := range [][]string{{"--from", "sqlite:/x", "--to", "etcd:" + etcd.URL}, {"--from", "bbolt:", "--to", "etcd:" + etcd.URL}} {
		if _, err := runMigrate(t, bad...); err == nil || !strings.Contains(err.Error(), "want bbolt:DATA_DIR or etcd:URL") {
			t.Errorf("migrate %v: %v", bad, err)
		}
	}
}
