package hub_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/controllers/controllerutil"
	"flotilla.dev/flotilla/hub/controllers/manager"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/hub/store/etcdstore/etcdtest"
)

// TestTwoHubsOnEtcd runs two hubs on a three-member etcd, the second
// given a copy of the first's DATA_DIR/pki as the docs say: one admin
// kubeconfig works on both, a write on one is read and watched on the
// other, a stale write is refused on either, the Secret etcd holds is
// sealed, and losing an etcd member stops nothing.
func TestTwoHubsOnEtcd(t *testing.T) {
	members := etcdtest.StartCluster(t, t.TempDir(), 3)
	etcd := members[1]
	cfg := hubtest.Options{Store: hub.StoreEtcd, Etcd: hub.EtcdConfig{Endpoints: etcdtest.URLs(members)}}
	a := hubtest.Start(t, cfg)
	cfg.DataDir = a.PeerDataDir()
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

	// One etcd member of three goes: the hubs go on.
	members[0].Stop()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := b.Client.CoreV1().ConfigMaps("default").Create(wctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-loss"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a write through hub B with an etcd member gone: %v", err)
	}
	if _, err := a.Client.CoreV1().ConfigMaps("default").Get(wctx, "after-loss", metav1.GetOptions{}); err != nil {
		t.Fatalf("hub A reads it: %v", err)
	}
}

// TestServiceAddressesAcrossHubs creates Services through two hubs on one
// etcd at once: both hubs start from the same view, yet no ClusterIP or
// NodePort is handed out twice, because each is reserved in the store.
// A third hub's start repairs the reservations: it frees one no Service
// holds (a hub died between reserving and writing) and restores one a
// Service holds.
func TestServiceAddressesAcrossHubs(t *testing.T) {
	etcd := etcdtest.Start(t, t.TempDir())
	cfg := hubtest.Options{Store: hub.StoreEtcd, Etcd: hub.EtcdConfig{Endpoints: etcdtest.URLs([]*etcdtest.Etcd{etcd})}}
	a := hubtest.Start(t, cfg)
	cfg.DataDir = a.PeerDataDir()
	b := hubtest.Start(t, cfg)
	ctx := context.Background()

	var wg sync.WaitGroup
	var mu sync.Mutex
	ips, ports := map[string]string{}, map[int32]string{}
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := a
			if i%2 == 1 {
				h = b
			}
			name := fmt.Sprintf("svc-%d", i)
			s, err := h.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
			if err != nil {
				t.Errorf("create %s: %v", name, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if other, dup := ips[s.Spec.ClusterIP]; dup {
				t.Errorf("%s and %s both got ClusterIP %s", other, name, s.Spec.ClusterIP)
			}
			ips[s.Spec.ClusterIP] = name
			np := s.Spec.Ports[0].NodePort
			if other, dup := ports[np]; dup {
				t.Errorf("%s and %s both got NodePort %d", other, name, np)
			}
			ports[np] = name
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	raw, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.URL}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	const res = "/flotilla/flotilla.dev/allocations/"
	resp, err := raw.Get(ctx, res, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	if want := len(ips) + len(ports); len(resp.Kvs) < want {
		t.Fatalf("%d reservations in etcd, want at least %d (one per ClusterIP and NodePort)", len(resp.Kvs), want)
	}
	s0, err := a.Client.CoreV1().Services("default").Get(ctx, "svc-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Delete(ctx, res+"serviceips/"+s0.Spec.ClusterIP); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, res+"serviceips/10.43.250.250", "gone/svc 2020-01-01T00:00:00Z"); err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = a.PeerDataDir()
	hubtest.Start(t, cfg)
	if got, err := raw.Get(ctx, res+"serviceips/10.43.250.250"); err != nil || len(got.Kvs) != 0 {
		t.Errorf("a reservation no Service holds survived a hub's start: %v %v", got, err)
	}
	if got, err := raw.Get(ctx, res+"serviceips/"+s0.Spec.ClusterIP); err != nil || len(got.Kvs) != 1 || !strings.HasPrefix(string(got.Kvs[0].Value), "default/svc-0 ") {
		t.Errorf("the reservation of svc-0's ClusterIP was not restored: %v %v", got, err)
	}
}

// TestLeaderFailover runs the controllers on two hubs sharing an etcd:
// one leads at a time (a Deployment gets exactly its replicas), and when
// the leading hub stops, the other takes over and carries on.
func TestLeaderFailover(t *testing.T) {
	etcd := etcdtest.Start(t, t.TempDir())
	loops := func(identity string) []hub.Loop {
		return []hub.Loop{{Name: "controllers", Run: func(ctx context.Context, cfg *rest.Config) error {
			return manager.Run(ctx, cfg, manager.Options{
				Disable: []string{manager.NodeLifecycle, manager.Scheduler, manager.EndpointSlice, manager.DaemonSet},
				LeaderElection: controllerutil.LeaderElection{Enabled: true, LeaseName: manager.LeaseName, Identity: identity,
					LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond},
			})
		}}}
	}
	cfg := hubtest.Options{Store: hub.StoreEtcd, Etcd: hub.EtcdConfig{Endpoints: []string{etcd.URL}}, Loops: loops("hub-a")}
	a := hubtest.Start(t, cfg)
	cfg.DataDir, cfg.Loops = a.PeerDataDir(), loops("hub-b")
	b := hubtest.Start(t, cfg)
	hubs := map[string]*hubtest.Hub{"hub-a": a, "hub-b": b}
	ctx := context.Background()

	holder := func(c kubernetes.Interface) string {
		l, err := c.CoordinationV1().Leases("flotilla-system").Get(ctx, manager.LeaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	var leader string
	for deadline := time.Now().Add(30 * time.Second); leader == ""; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no hub leads")
		}
		leader = holder(a.Client)
	}
	follower := "hub-b"
	if leader == "hub-b" {
		follower = "hub-a"
	}
	fc := hubs[follower].Client

	pods := func(want int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			list, err := fc.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err == nil && len(list.Items) == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("want %d pods, have %d (%v)", want, len(list.Items), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// Exactly: a second controller acting too would make more.
		time.Sleep(2 * time.Second)
		if list, _ := fc.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"}); len(list.Items) != want {
			t.Fatalf("%d pods for %d replicas", len(list.Items), want)
		}
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.local/web@sha256:" + strings.Repeat("ab", 32)}}}}},
	}
	if _, err := fc.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods(3)

	hubs[leader].Stop()
	stopped := time.Now()
	for holder(fc) != follower {
		if time.Since(stopped) > 30*time.Second {
			t.Fatalf("%s did not take over within 30s (holder %q)", follower, holder(fc))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%s leads %v after %s stopped", follower, time.Since(stopped).Round(100*time.Millisecond), leader)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := fc.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.Replicas = ptr.To[int32](5)
		_, err = fc.AppsV1().Deployments("default").Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	pods(5)
}

// TestRevocationAcrossHubs: a Node deleted through one hub refuses its
// device on the other within seconds; the revocation is in the store.
func TestRevocationAcrossHubs(t *testing.T) {
	etcd := etcdtest.Start(t, t.TempDir())
	cfg := hubtest.Options{Store: hub.StoreEtcd, Etcd: hub.EtcdConfig{Endpoints: etcdtest.URLs([]*etcdtest.Etcd{etcd})}}
	a := hubtest.Start(t, cfg)
	cfg.DataDir = a.PeerDataDir()
	b := hubtest.Start(t, cfg)
	ctx := context.Background()

	dev := b.NodeClient("kiosk-7")
	if _, err := dev.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kiosk-7"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the device registers through hub B: %v", err)
	}
	if err := a.Client.CoreV1().Nodes().Delete(ctx, "kiosk-7", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		_, err := dev.CoreV1().Nodes().Get(ctx, "kiosk-7", metav1.GetOptions{})
		if apierrors.IsUnauthorized(err) {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("hub B still serves the device 10s after its Node was deleted on hub A (err = %v)", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("hub B refused the device %s after the deletion on hub A", time.Since(start).Round(time.Millisecond))
}
