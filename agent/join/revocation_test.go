package join_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"flotilla.dev/flotilla/agent/join"
	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/auth"
)

// TestDeletedNodeIsRevoked: deleting a Node refuses its device's
// certificate within seconds; the device can neither renew nor register
// the name again; a new join token lets a device join under the name.
func TestDeletedNodeIsRevoked(t *testing.T) {
	h := startHub(t)
	ctx := context.Background()
	tok := h.token(t)
	id, err := join.Join(ctx, join.Config{Hub: h.url, Token: tok.Token, CAHash: tok.CAHash, NodeName: "till-3", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	dev := kubernetes.NewForConfigOrDie(id.RESTConfig(h.url))
	if _, err := dev.CoreV1().Nodes().Get(ctx, "till-3", metav1.GetOptions{}); err != nil {
		t.Fatalf("the device before its Node was deleted: %v", err)
	}
	// A dry run revokes nothing.
	if err := h.admin.CoreV1().Nodes().Delete(ctx, "till-3", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	if _, err := dev.CoreV1().Nodes().Get(ctx, "till-3", metav1.GetOptions{}); err != nil {
		t.Fatalf("the device after a dry-run deletion of its Node: %v", err)
	}
	deleted := time.Now()
	if err := h.admin.CoreV1().Nodes().Delete(ctx, "till-3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := dev.CoreV1().Nodes().Get(ctx, "till-3", metav1.GetOptions{})
		if apierrors.IsUnauthorized(err) {
			if !strings.Contains(err.Error(), "revoked") {
				t.Errorf("the refusal does not say the certificate was revoked: %v", err)
			}
			break
		}
		if time.Since(deleted) > 10*time.Second {
			t.Fatalf("the deleted Node's device still gets %v after 10s", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("refused %s after the Node was deleted", time.Since(deleted).Round(time.Millisecond))

	// It cannot register the name again, nor renew.
	_, err = dev.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "till-3"}}, metav1.CreateOptions{})
	if !apierrors.IsUnauthorized(err) {
		t.Errorf("re-registering with the revoked certificate: err = %v, want 401", err)
	}
	wantRefused(t, id.Renew(ctx, h.url), http.StatusUnauthorized, "revoked")
	if _, err := h.admin.CoreV1().Nodes().Get(ctx, "till-3", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Node exists again (err = %v)", err)
	}
	list := exec.Command(h.bin, "kubeconfig", "revoke", "list", "--data-dir", h.dataDir)
	if out, err := list.CombinedOutput(); err != nil || !strings.Contains(string(out), "system:node:till-3") || !strings.Contains(string(out), "deleted by flotilla:admin") {
		t.Errorf("revoke list (%v):\n%s", err, out)
	}

	// A new token: the device (a fresh data dir, as after a reinstall)
	// joins under the name; the old certificate stays refused.
	fresh := h.token(t, "--uses", "1")
	id2, err := join.Join(ctx, join.Config{Hub: h.url, Token: fresh.Token, CAHash: fresh.CAHash, NodeName: "till-3", DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("join with a new token after the revocation: %v", err)
	}
	dev2 := kubernetes.NewForConfigOrDie(id2.RESTConfig(h.url))
	if _, err := dev2.CoreV1().Nodes().Get(ctx, "till-3", metav1.GetOptions{}); err != nil {
		t.Errorf("the device that joined again: %v", err)
	}
	if err := id2.Renew(ctx, h.url); err != nil {
		t.Errorf("the device that joined again cannot renew: %v", err)
	}
	if _, err := dev.CoreV1().Nodes().Get(ctx, "till-3", metav1.GetOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("the revoked certificate after the name was taken again: err = %v, want 401", err)
	}
}

// TestLostRenewalAnswer: a renewal whose answer never reached the device
// is retried with the same new key and succeeds; before, the Node had
// recorded the new key and the device's old one got 409 for good.
func TestLostRenewalAnswer(t *testing.T) {
	h := startHub(t)
	ctx := context.Background()
	tok := h.token(t)
	dir := t.TempDir()
	id, err := join.Join(ctx, join.Config{Hub: h.url, Token: tok.Token, CAHash: tok.CAHash, NodeName: "gw-9", DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	old := id.Certificate().Leaf

	// The renewal as Identity.Renew starts it: the new key kept first.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, join.PKIDir, join.NextKeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	csrPEM, _, err := agentapi.CSRFor(key, agentapi.NodeUser("gw-9"), []string{agentapi.NodesGroup})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(agentapi.RenewRequest{CSR: string(csrPEM)})
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: id.TLSConfig()}}
	resp, err := c.Post(h.url+agentapi.PathRenew, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // the answer is lost on the way
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the first renewal: %s", resp.Status)
	}
	node, err := h.admin.CoreV1().Nodes().Get(ctx, "gw-9", metav1.GetOptions{})
	if err != nil || node.Annotations[auth.AnnotationClientKey] == auth.CertFingerprint(old) {
		t.Fatalf("the hub did not record the new key (%v): the test would prove nothing", err)
	}

	// The device, still on its old certificate, tries again.
	if err := id.Renew(ctx, h.url); err != nil {
		t.Fatalf("the retried renewal: %v", err)
	}
	got := id.Certificate().Leaf
	if auth.CertFingerprint(got) != node.Annotations[auth.AnnotationClientKey] {
		t.Error("the retried renewal did not use the kept key")
	}
	dev := kubernetes.NewForConfigOrDie(id.RESTConfig(h.url))
	if _, err := dev.CoreV1().Nodes().Get(ctx, "gw-9", metav1.GetOptions{}); err != nil {
		t.Errorf("the renewed certificate: %v", err)
	}
	// The next renewal moves on to another key.
	if err := id.Renew(ctx, h.url); err != nil {
		t.Fatalf("the next renewal: %v", err)
	}
	if auth.CertFingerprint(id.Certificate().Leaf) == auth.CertFingerprint(got) {
		t.Error("the next renewal kept the key")
	}
}

// TestExpiredCertificateRenews: a device back after its certificate
// expired renews with it, if its key is the one its Node records; an
// expired certificate of a key renewed away cannot.
func TestExpiredCertificateRenews(t *testing.T) {
	h := startHub(t, "--node-cert-ttl", "2s")
	ctx := context.Background()
	tok := h.token(t)
	dir := t.TempDir()
	id, err := join.Join(ctx, join.Config{Hub: h.url, Token: tok.Token, CAHash: tok.CAHash, NodeName: "van-2", DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	oldPEM, err := os.ReadFile(id.CertFile())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(id.NotAfter()) + 1100*time.Millisecond)
	dev := kubernetes.NewForConfigOrDie(id.RESTConfig(h.url))
	if _, err := dev.CoreV1().Nodes().Get(ctx, "van-2", metav1.GetOptions{}); !apierrors.IsUnauthorized(err) {
		t.Fatalf("an expired certificate reads the API: err = %v, want 401", err)
	}
	if err := id.Renew(ctx, h.url); err != nil {
		t.Fatalf("renewing with the expired certificate: %v", err)
	}
	if !id.NotAfter().After(time.Now()) {
		t.Fatalf("the renewed certificate ends %s", id.NotAfter())
	}
	if _, err := kubernetes.NewForConfigOrDie(id.RESTConfig(h.url)).CoreV1().Nodes().Get(ctx, "van-2", metav1.GetOptions{}); err != nil {
		t.Errorf("the renewed certificate: %v", err)
	}

	// The first certificate's key is no longer the Node's.
	stale := t.TempDir()
	if err := os.MkdirAll(filepath.Join(stale, join.PKIDir), 0o700); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(id.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, join.PKIDir, join.CAFile), caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, join.PKIDir, join.NodeFile), oldPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	staleID, err := join.Load(stale)
	if err != nil {
		t.Fatal(err)
	}
	err = staleID.Renew(ctx, h.url)
	var re *join.RefusedError
	if err == nil {
		t.Fatal("an expired certificate of a key renewed away renewed")
	} else if !errors.As(err, &re) || re.Code/100 != 4 {
		t.Errorf("refusal = %v, want a 4xx from the hub", err)
	}
}
