package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"flotilla.dev/flotilla/internal/testbin"
)

func runHub(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("flotilla-hub %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// TestTokenAndKubeconfigCommands runs the commands as an operator would
// against a running hub binary: tokens are created, listed (without their
// secret) and deleted; a viewer kubeconfig reads but cannot see Secrets;
// and the Secret's value is nowhere in state.db or its log.
func TestTokenAndKubeconfigCommands(t *testing.T) {
	bin := testbin.Path(t, "flotilla-hub")
	dir := t.TempDir()
	_, admin := startHub(t, bin, dir)
	ctx := context.Background()

	var tok struct {
		Token   string  `json:"token"`
		CAHash  string  `json:"caHash"`
		Expires *string `json:"expires"`
	}
	out := runHub(t, bin, "token", "create", "--data-dir", dir, "-o", "json", "--ttl", "2h", "--uses", "3", "--labels", "site=shop-1", "--description", "shop 1 kiosks")
	if err := json.Unmarshal([]byte(out), &tok); err != nil {
		t.Fatalf("-o json printed %q: %v", out, err)
	}
	if len(tok.Token) != 23 || tok.Token[6] != '.' || !strings.HasPrefix(tok.CAHash, "sha256:") || tok.Expires == nil {
		t.Fatalf("token create -o json = %+v", tok)
	}
	text := runHub(t, bin, "token", "create", "--data-dir", dir)
	for _, want := range []string{"token:", "caHash:  " + tok.CAHash, "flotilla-agent --hub https://"} {
		if !strings.Contains(text, want) {
			t.Errorf("token create prints %q, without %q", text, want)
		}
	}
	id := tok.Token[:6]
	list := runHub(t, bin, "token", "list", "--data-dir", dir)
	if !strings.Contains(list, id) || !strings.Contains(list, "3/3") || !strings.Contains(list, "site=shop-1") {
		t.Errorf("token list:\n%s", list)
	}
	if strings.Contains(list, tok.Token[7:]) {
		t.Error("token list shows a token's secret")
	}
	// Only a hash of the secret is stored.
	sec, err := admin.CoreV1().Secrets("flotilla-system").Get(ctx, "bootstrap-token-"+id, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range sec.Data {
		if strings.Contains(string(v), tok.Token[7:]) {
			t.Errorf("the token's secret is stored in %s", k)
		}
	}
	runHub(t, bin, "token", "delete", "--data-dir", dir, id)
	if list := runHub(t, bin, "token", "list", "--data-dir", dir); strings.Contains(list, id) {
		t.Errorf("deleted token still listed:\n%s", list)
	}

	// A viewer's kubeconfig.
	kc := filepath.Join(t.TempDir(), "vera.kubeconfig")
	runHub(t, bin, "kubeconfig", "create", "--data-dir", dir, "--user", "vera", "--role", "viewer", "-o", kc)
	st, err := os.Stat(kc)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	viewer := kubernetes.NewForConfigOrDie(cfg)
	if _, err := viewer.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("viewer cannot list namespaces: %v", err)
	}
	if _, err := viewer.CoreV1().Secrets("flotilla-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("viewer listing secrets: err = %v, want 403", err)
	}
	if _, err := viewer.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("viewer creating: err = %v, want 403", err)
	}
	// Revoked: vera's kubeconfig is refused within seconds, on every
	// request; the hub's own admin cannot be revoked; a kubeconfig made
	// for vera afterwards works.
	runHub(t, bin, "kubeconfig", "revoke", "--data-dir", dir, "--user", "vera", "--reason", "left the team")
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := viewer.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if apierrors.IsUnauthorized(err) {
			if !strings.Contains(err.Error(), "revoked") || !strings.Contains(err.Error(), "left the team") {
				t.Errorf("the refusal does not say why: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("vera's revoked kubeconfig still works after 10s (err = %v)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if list := runHub(t, bin, "kubeconfig", "revoke", "list", "--data-dir", dir); !strings.Contains(list, "vera") || !strings.Contains(list, "left the team") {
		t.Errorf("revoke list:\n%s", list)
	}
	for _, bad := range []string{"flotilla:admin", "system:node:x", ""} {
		cmd := exec.Command(bin, "kubeconfig", "revoke", "--data-dir", dir, "--user", bad)
		if b, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("revoke --user %q was accepted: %s", bad, b)
		}
	}
	if _, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("the admin after a revocation: %v", err)
	}
	kc2 := filepath.Join(t.TempDir(), "vera2.kubeconfig")
	runHub(t, bin, "kubeconfig", "create", "--data-dir", dir, "--user", "vera", "--role", "viewer", "-o", kc2)
	cfg2, err := clientcmd.BuildConfigFromFlags("", kc2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubernetes.NewForConfigOrDie(cfg2).CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("a kubeconfig issued after the revocation: %v", err)
	}
	if _, err := viewer.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("the revoked kubeconfig after a new one was issued: err = %v, want 401", err)
	}

	// The role is checked.
	cmd := exec.Command(bin, "kubeconfig", "create", "--data-dir", dir, "--user", "x", "--role", "root", "-o", filepath.Join(t.TempDir(), "x"))
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "unknown role") {
		t.Errorf("--role root: %v %s", err, b)
	}

	// Secret data is encrypted at rest.
	const value = "correct-horse-battery-staple-42"
	if _, err := admin.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		StringData: map[string]string{"password": value}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := admin.CoreV1().Secrets("default").Get(ctx, "db", metav1.GetOptions{})
	if err != nil || string(got.Data["password"]) != value {
		t.Fatalf("the secret does not read back (%v)", err)
	}
	if _, err := admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "marker"},
		Data: map[string]string{"k": "plain-marker-" + value[:7]}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// At rest is the store file and its write-ahead log, which holds the
	// writes until they are checkpointed into the file.
	files, err := filepath.Glob(filepath.Join(dir, "state.wal", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var raw []byte
	for _, f := range append([]string{filepath.Join(dir, "state.db")}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		raw = append(raw, b...)
	}
	// The store compresses its records (zstd): what is at rest is what
	// the files hold and what their frames expand to.
	raw = append(raw, expandZstdFrames(raw)...)
	if !bytes.Contains(raw, []byte("plain-marker-")) {
		t.Fatal("state.db and state.wal/ do not hold the config map written just before: the check reads the wrong files")
	}
	for _, form := range []string{value, base64.StdEncoding.EncodeToString([]byte(value))} {
		if bytes.Contains(raw, []byte(form)) {
			t.Errorf("state.db or state.wal/ contains the secret value (%q)", form)
		}
	}
	key, err := os.Stat(filepath.Join(dir, "pki", "secrets.key"))
	if err != nil || key.Mode().Perm() != 0o600 {
		t.Errorf("secrets.key mode %v (%v), want 0600", key.Mode().Perm(), err)
	}
}

// expandZstdFrames returns what every zstd frame in b expands to.
func expandZstdFrames(b []byte) []byte {
	magic := []byte{0x28, 0xb5, 0x2f, 0xfd}
	var out []byte
	for i := 0; ; {
		j := bytes.Index(b[i:], magic)
		if j < 0 {
			return out
		}
		i += j
		if d, err := zstd.NewReader(bytes.NewReader(b[i:]), zstd.WithDecoderConcurrency(1)); err == nil {
			var frame bytes.Buffer
			_, _ = io.Copy(&frame, io.LimitReader(d, 16<<20)) // up to the first error: the frame's end
			d.Close()
			out = append(out, frame.Bytes()...)
		}
		i += len(magic)
	}
}
