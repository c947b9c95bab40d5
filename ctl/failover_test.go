package ctl

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/hub/store/etcdstore/etcdtest"
	"flotilla.dev/flotilla/internal/testenv"
)

// flotctl given two hubs sharing an etcd (--hub a,b) answers through
// whichever is up.
func TestHubFailover(t *testing.T) {
	testenv.Integration(t, "starts hubs and an etcd")
	etcd := etcdtest.Start(t, t.TempDir())
	opts := hubtest.Options{Store: hub.StoreEtcd, Etcd: hub.EtcdConfig{Endpoints: []string{etcd.URL}}}
	a := hubtest.Start(t, opts)
	opts.DataDir = a.PeerDataDir()
	b := hubtest.Start(t, opts)
	if _, err := b.Client.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := &hubRun{t: t, hub: a, env: map[string]string{
		"FLOTILLA_KUBECONFIG": filepath.Join(a.DataDir, "admin.kubeconfig"), "HOME": t.TempDir(),
		"FLOTILLA_HUB": a.URL() + "," + b.URL(),
	}}
	if out := r.ok("get", "configmaps"); !strings.Contains(out, "settings") {
		t.Fatalf("through hub a: %s", out)
	}
	a.Stop()
	if out := r.ok("get", "configmaps"); !strings.Contains(out, "settings") {
		t.Fatalf("with hub a gone: %s", out)
	}
	if _, errOut, code := r.run(context.Background(), "", "--hub", "http://x", "get", "configmaps"); code == 0 || !strings.Contains(errOut, "want https://HOST[:PORT]") {
		t.Fatalf("a bad --hub: %d %q", code, errOut)
	}
}
