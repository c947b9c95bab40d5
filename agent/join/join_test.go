package join_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"flotilla.dev/flotilla/agent/join"
	"flotilla.dev/flotilla/hub/audit"
	"flotilla.dev/flotilla/hub/auth"
	"flotilla.dev/flotilla/internal/testbin"
)

type hubProc struct {
	bin, dataDir, url string
	admin             kubernetes.Interface
}

var servingRE = regexp.MustCompile(`serving (https://\S+);`)

// startHub runs the real flotilla-hub binary on a loopback port, with
// extra serve flags.
func startHub(t *testing.T, flags ...string) *hubProc {
	t.Helper()
	bin := testbin.Path(t, "flotilla-hub")
	dir := t.TempDir()
	cmd := exec.Command(bin, append([]string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--config="}, flags...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				urlc <- m[1]
			}
		}
	}()
	h := &hubProc{bin: bin, dataDir: dir}
	select {
	case h.url = <-urlc:
	case <-time.After(60 * time.Second):
		t.Fatal("the hub did not start within 60s")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	h.admin = kubernetes.NewForConfigOrDie(cfg)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := h.admin.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err == nil {
			return h
		} else if time.Now().After(deadline) {
			t.Fatalf("the hub did not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type tokenOut struct {
	Token   string  `json:"token"`
	CAHash  string  `json:"caHash"`
	Expires *string `json:"expires"`
}

// token runs `flotilla-hub token create -o json` as an operator would.
func (h *hubProc) token(t *testing.T, args ...string) tokenOut {
	t.Helper()
	cmd := exec.Command(h.bin, append([]string{"token", "create", "--data-dir", h.dataDir, "-o", "json"}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("token create: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var tok tokenOut
	if err := json.Unmarshal(out, &tok); err != nil {
		t.Fatalf("token create -o json printed %q: %v", out, err)
	}
	if tok.Token == "" || !strings.HasPrefix(tok.CAHash, "sha256:") {
		t.Fatalf("token create -o json printed %q", out)
	}
	return tok
}

func wantRefused(t *testing.T, err error, code int, says string) {
	t.Helper()
	var re *join.RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, want a refusal by the hub", err)
	}
	if re.Code != code || !strings.Contains(re.Message, says) {
		t.Fatalf("refusal %d %q, want %d saying %q", re.Code, re.Message, code, says)
	}
}

func TestJoinEndToEnd(t *testing.T) {
	h := startHub(t)
	ctx := context.Background()

	// A good token, with labels for the Node and a single use.
	tok := h.token(t, "--uses", "1", "--labels", "site=shop-7,node.flotilla.dev/tier=edge")
	if tok.Expires == nil {
		t.Error("the token has no expiry, but --ttl defaults to 24h")
	}
	agentDir := t.TempDir()
	before := connsTo(t, h.url)
	id, err := join.Join(ctx, join.Config{Hub: h.url, Token: tok.Token, CAHash: tok.CAHash, NodeName: "kiosk-1", DataDir: agentDir})
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	// A join is two requests; a connection it kept would cost the hub a
	// goroutine and buffers per device until the hub's idle timeout.
	if after := connsTo(t, h.url); after != before {
		t.Errorf("the join left %d connections to the hub open", after-before)
	}
	if id.NodeName() != "kiosk-1" {
		t.Errorf("node name %q", id.NodeName())
	}
	if life := id.NotAfter().Sub(time.Now()); life < 167*time.Hour || life > 168*time.Hour {
		t.Errorf("certificate valid for %s, want a week (--node-cert-ttl's default)", life)
	}
	st, err := os.Stat(filepath.Join(agentDir, "pki", join.NodeFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key and certificate file: mode %v, %v; want 0600", st.Mode().Perm(), err)
	}
	// The device talks to the hub as itself, and its Node carries the
	// token's labels and its key.
	dev := kubernetes.NewForConfigOrDie(id.RESTConfig(h.url))
	node, err := dev.CoreV1().Nodes().Get(ctx, "kiosk-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the device cannot read its Node: %v", err)
	}
	if node.Labels["site"] != "shop-7" || node.Labels["node.flotilla.dev/tier"] != "edge" {
		t.Errorf("node labels %v, want the token's", node.Labels)
	}
	if got, want := node.Annotations[auth.AnnotationClientKey], auth.CertFingerprint(id.Certificate().Leaf); got != want {
		t.Errorf("node records key %q, want %q", got, want)
	}
	if _, err := dev.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); err == nil {
		t.Error("a device could list secrets")
	}

	// The token had one use.
	_, err = join.Join(ctx, join.Config{Hub: h.url, Token: tok.Token, CAHash: tok.CAHash, NodeName: "kiosk-2", DataDir: t.TempDir()})
	wantRefused(t, err, http.StatusUnauthorized, "used for all the 1 joins")

	// An expired token.
	short := h.token(t, "--ttl", "1s")
	exp, err := time.Parse(time.RFC3339, *short.Expires)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(exp) + 50*time.Millisecond)
	_, err = join.Join(ctx, join.Config{Hub: h.url, Token: short.Token, CAHash: short.CAHash, NodeName: "kiosk-3", DataDir: t.TempDir()})
	wantRefused(t, err, http.StatusUnauthorized, "expired")

	// A wrong CA hash: the device refuses the hub and sends it nothing.
	once := h.token(t, "--uses", "1")
	wrong := "sha256:" + strings.Repeat("0", 64)
	dir4 := t.TempDir()
	_, err = join.Join(ctx, join.Config{Hub: h.url, Token: once.Token, CAHash: wrong, NodeName: "kiosk-4", DataDir: dir4})
	if !errors.Is(err, join.ErrCAHashMismatch) {
		t.Fatalf("wrong CA hash: err = %v, want ErrCAHashMismatch", err)
	}
	if _, err := os.Stat(filepath.Join(dir4, "pki", join.NodeFile)); !os.IsNotExist(err) {
		t.Errorf("an identity was stored after a refused hub (%v)", err)
	}
	// The token was never sent: its one use is still there.
	if _, err := join.Join(ctx, join.Config{Hub: h.url, Token: once.Token, CAHash: once.CAHash, NodeName: "kiosk-4", DataDir: dir4}); err != nil {
		t.Fatalf("the token was used up by a device that refused the hub: %v", err)
	}

	// A second device (another key) under a joined name is refused until
	// an admin deletes the Node.
	many := h.token(t)
	_, err = join.Join(ctx, join.Config{Hub: h.url, Token: many.Token, CAHash: many.CAHash, NodeName: "kiosk-1", DataDir: t.TempDir()})
	wantRefused(t, err, http.StatusConflict, "already joined")
	if err := h.admin.CoreV1().Nodes().Delete(ctx, "kiosk-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	replacement, err := join.Join(ctx, join.Config{Hub: h.url, Token: many.Token, CAHash: many.CAHash, NodeName: "kiosk-1", DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("join after the admin deleted the Node: %v", err)
	}
	node, err = h.admin.CoreV1().Nodes().Get(ctx, "kiosk-1", metav1.GetOptions{})
	if err != nil || node.Annotations[auth.AnnotationClientKey] != auth.CertFingerprint(replacement.Certificate().Leaf) {
		t.Errorf("the Node does not record the replacement's key (%v)", err)
	}
	// The old device was revoked with its Node: it can no longer renew.
	err = id.Renew(ctx, h.url)
	wantRefused(t, err, http.StatusUnauthorized, "revoked")

	// Bad CSR and bad token shapes are explained.
	_, err = join.Join(ctx, join.Config{Hub: h.url, Token: "not-a-token", CAHash: many.CAHash, NodeName: "kiosk-5", DataDir: t.TempDir()})
	wantRefused(t, err, http.StatusBadRequest, "abcdef.0123456789abcdef")

	// Refusals and joins are audited.
	deadline := time.Now().Add(10 * time.Second)
	for {
		es, _ := audit.ReadFile(filepath.Join(h.dataDir, audit.FileName))
		var joined, refused bool
		for _, e := range es {
			joined = joined || (e.Path == "/join/v1/csr" && e.Code == 200 && strings.Contains(e.Reason, "kiosk-1"))
			refused = refused || (e.Path == "/join/v1/csr" && e.Code == 401 && strings.Contains(e.Reason, "expired"))
		}
		if joined && refused {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit log lacks the join (%v) or the refusal (%v)", joined, refused)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRenewalAndOfflineRestart(t *testing.T) {
	h := startHub(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tok := h.token(t)
	dir := t.TempDir()
	id, err := join.Join(ctx, join.Config{Hub: h.url, Token: tok.Token, CAHash: tok.CAHash, NodeName: "gw-1", DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	first := id.Certificate().Leaf

	// A device restarting with the hub away needs only its data dir.
	again, err := join.Join(ctx, join.Config{Hub: "https://127.0.0.1:1", NodeName: "gw-1", DataDir: dir})
	if err != nil {
		t.Fatalf("restart without the hub: %v", err)
	}
	if !again.Certificate().Leaf.Equal(first) {
		t.Error("restart produced another certificate")
	}

	// At 71% of its lifetime the certificate is renewed, with a new key.
	life := first.NotAfter.Sub(first.NotBefore)
	late := first.NotBefore.Add(time.Duration(float64(life) * 0.71))
	var cur *join.Identity
	// The clock is late only for the first certificate, so that the
	// renewed one is not due at once.
	clock := func() time.Time {
		if cur == nil || cur.Certificate().Leaf.Equal(first) {
			return late
		}
		return time.Now()
	}
	id, err = join.Join(ctx, join.Config{DataDir: dir, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	cur = id
	// A session of the first certificate's; the renewal must forget it.
	id.Sessions().Put("hub", &tls.ClientSessionState{})
	done := make(chan error, 1)
	go func() { done <- id.Run(ctx, h.url) }()
	deadline := time.Now().Add(30 * time.Second)
	for id.Certificate().Leaf.Equal(first) {
		if time.Now().After(deadline) {
			t.Fatal("the certificate was not renewed at 71% of its lifetime")
		}
		time.Sleep(20 * time.Millisecond)
	}
	renewed := id.Certificate().Leaf
	if _, ok := id.Sessions().Get("hub"); ok {
		t.Error("a TLS session of the old certificate survived the renewal")
	}
	if string(renewed.RawSubjectPublicKeyInfo) == string(first.RawSubjectPublicKeyInfo) {
		t.Error("renewal kept the old key")
	}
	if renewed.NotAfter.Before(first.NotAfter) || renewed.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Errorf("renewed certificate (serial %s, ends %s) is not a new one after %s", renewed.SerialNumber, renewed.NotAfter, first.NotAfter)
	}
	// The new certificate is on disk and works; the Node records its key.
	stored, err := join.Load(dir)
	if err != nil || !stored.Certificate().Leaf.Equal(renewed) {
		t.Fatalf("the renewed certificate was not stored (%v)", err)
	}
	dev := kubernetes.NewForConfigOrDie(stored.RESTConfig(h.url))
	node, err := dev.CoreV1().Nodes().Get(ctx, "gw-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("renewed certificate refused: %v", err)
	}
	if node.Annotations[auth.AnnotationClientKey] != auth.CertFingerprint(renewed) {
		t.Error("the Node does not record the renewed key")
	}
	if node.Annotations[auth.AnnotationPreviousClientKey] != auth.CertFingerprint(first) {
		t.Error("the Node does not record the key renewed away from")
	}
	if _, err := os.Stat(filepath.Join(dir, join.PKIDir, join.NextKeyFile)); !os.IsNotExist(err) {
		t.Errorf("the renewal key is still kept after the renewal (%v)", err)
	}
	// The renewed identity keeps working for the device's own writes.
	// Another writer (the renewal recording the key on the Node) may still be
	// finishing, so a conflict is retried on a fresh read, as an agent does.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := dev.CoreV1().Nodes().Get(ctx, "gw-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		_, err = dev.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Errorf("status update with the renewed certificate: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// connsTo counts this process's established TCP connections to the port
// of hubURL (from /proc: the socket inodes of /proc/self/net/tcp* that
// are among this process's file descriptors).
func connsTo(t *testing.T, hubURL string) int {
	t.Helper()
	u, err := url.Parse(hubURL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "01" { // ESTABLISHED
				continue
			}
			_, remote, _ := strings.Cut(fs[2], ":")
			if p, err := strconv.ParseInt(remote, 16, 32); err == nil && int(p) == port {
				inodes[fs[9]] = true
			}
		}
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("counting connections needs /proc: %v", err)
	}
	n := 0
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if inode, ok := strings.CutPrefix(target, "socket:["); err == nil && ok && inodes[strings.TrimSuffix(inode, "]")] {
			n++
		}
	}
	return n
}
