package secrets_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/hub/secrets"
	"flotilla.dev/flotilla/hub/store/boltstore"
	"flotilla.dev/flotilla/hub/store/etcdstore/etcdtest"
)

func createSecret(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	_, err := c.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
		StringData: map[string]string{"password": "p-" + name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// checkUnreadable: the Secret's read fails alone, with a Status that says
// what to do, other Secrets list, and an Event says the same.
func checkUnreadable(t *testing.T, h *hubtest.Hub, c kubernetes.Interface, ns, bad, good string) {
	t.Helper()
	ctx := context.Background()
	_, err := c.CoreV1().Secrets(ns).Get(ctx, bad, metav1.GetOptions{})
	var se *apierrors.StatusError
	if !apierrors.IsInternalError(err) || !errorsAs(err, &se) || se.ErrStatus.Code != http.StatusInternalServerError {
		t.Fatalf("get the undecryptable Secret: err = %v, want 500", err)
	}
	for _, want := range []string{"Secret " + ns + "/" + bad, "cannot be decrypted with " + filepath.Join(h.DataDir, "pki", secrets.KeyFile), "restore the key", "delete the Secret"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the 500 does not say %q: %v", want, err)
		}
	}
	list, err := c.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("one undecryptable Secret fails the list of all: %v", err)
	}
	var names []string
	for _, s := range list.Items {
		names = append(names, s.Namespace+"/"+s.Name)
	}
	if !strings.Contains(strings.Join(names, " "), ns+"/"+good) || strings.Contains(strings.Join(names, " "), ns+"/"+bad+" ") {
		t.Errorf("list %v, want %s/%s and not %s/%s", names, ns, good, ns, bad)
	}
	if s, err := c.CoreV1().Secrets(ns).Get(ctx, good, metav1.GetOptions{}); err != nil || string(s.Data["password"]) != "p-"+good {
		t.Errorf("get the good Secret: %v", err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := hc.Get(h.URL() + "/readyz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Kind == "Secret" && ev.InvolvedObject.Name == bad && ev.Type == corev1.EventTypeWarning &&
				ev.Reason == "DecryptionFailed" && strings.Contains(ev.Message, "cannot be decrypted") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Warning Event about %s/%s among %d", ns, bad, len(evs.Items))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func errorsAs(err error, se **apierrors.StatusError) bool {
	s, ok := err.(*apierrors.StatusError)
	*se = s
	return ok
}

// TestDamagedSecretAtStart: a Secret whose stored value was damaged must
// not keep the hub unready nor fail every Secret list; it can be deleted,
// also with its namespace.
func TestDamagedSecretAtStart(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	if _, err := h.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct{ ns, name string }{{"default", "good"}, {"default", "bad"}, {"shop", "bad"}} {
		createSecret(t, h.Client, s.ns, s.name)
	}
	h.Stop()
	st, err := boltstore.Open(filepath.Join(h.DataDir, "state.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"default", "shop"} {
		kv, err := st.Get(ctx, secrets.Prefix+ns+"/bad")
		if err != nil {
			t.Fatal(err)
		}
		kv.Value[len(kv.Value)-1] ^= 1
		if _, err := st.Update(ctx, kv.Key, kv.Value, kv.ModRevision); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	h = h.Restart() // fails the test if the API does not become ready
	checkUnreadable(t, h, h.Client, "default", "bad", "good")

	// Deleting it is the way out; the name is free again.
	if err := h.Client.CoreV1().Secrets("default").Delete(ctx, "bad", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete the undecryptable Secret: %v", err)
	}
	if _, err := h.Client.CoreV1().Secrets("default").Get(ctx, "bad", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: %v, want 404", err)
	}
	createSecret(t, h.Client, "default", "bad")
	if s, err := h.Client.CoreV1().Secrets("default").Get(ctx, "bad", metav1.GetOptions{}); err != nil || string(s.Data["password"]) != "p-bad" {
		t.Errorf("the recreated Secret: %v", err)
	}

	// A deleted namespace takes its undecryptable Secrets with it.
	if err := h.Client.CoreV1().Namespaces().Delete(ctx, "shop", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := h.Client.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the namespace with an undecryptable Secret was not removed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := h.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Client.CoreV1().Secrets("shop").Get(ctx, "bad", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the undecryptable Secret outlived its namespace: %v", err)
	}
}

// TestSecretSealedWithAnotherKey: two hubs on one etcd, the second given
// the first's pki/ but not its secrets.key. Each writes a Secret the other
// cannot open: both must go on following the store (the watch case) and
// serve that Secret as the one failed read it is, and so must a hub that
// starts with it in the store.
func TestSecretSealedWithAnotherKey(t *testing.T) {
	etcd := etcdtest.Start(t, t.TempDir())
	cfg := hubtest.Options{Store: hub.StoreEtcd, Etcd: hub.EtcdConfig{Endpoints: []string{etcd.URL}}}
	a := hubtest.Start(t, cfg)
	ctx := context.Background()
	cfg.DataDir = a.PeerDataDir()
	if err := os.Remove(filepath.Join(cfg.DataDir, "pki", secrets.KeyFile)); err != nil {
		t.Fatal(err)
	}
	b := hubtest.Start(t, cfg)
	createSecret(t, a.Client, "default", "from-a")
	createSecret(t, b.Client, "default", "from-b")

	// Each saw the other's Secret in its watch: it goes on following the
	// store, and reads its own writes.
	for _, h := range []*hubtest.Hub{a, b} {
		name := "after-" + filepath.Base(h.DataDir)
		if _, err := h.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Client.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("a hub stopped following the store after an undecryptable watch event: %v", err)
		}
	}
	checkUnreadable(t, a, a.Client, "default", "from-b", "from-a")
	checkUnreadable(t, b, b.Client, "default", "from-a", "from-b")

	// B starts with A's Secret in the store.
	b = b.Restart() // fails the test if the API does not become ready
	checkUnreadable(t, b, b.Client, "default", "from-a", "from-b")

	// A deletes what it cannot read; B sees it gone.
	if err := a.Client.CoreV1().Secrets("default").Delete(ctx, "from-b", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete a Secret sealed with another key: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := b.Client.CoreV1().Secrets("default").Get(ctx, "from-b", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B still has the Secret A deleted: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
