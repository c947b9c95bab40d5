package controller

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/gitops/gittest"
	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/internal/testenv"
)

// logBuffer collects every log line of the hub and the loop, to check
// that no secret reaches them.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if os.Getenv("FLOTILLA_TEST_LOG") != "" {
		os.Stderr.Write(p)
	}
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type fixture struct {
	t    *testing.T
	git  *gittest.Repo
	h    *hubtest.Hub
	kube kubernetes.Interface
	dyn  dynamic.Interface
	logs *logBuffer
	// url is the hub's API address; ca verifies its certificate.
	url string
	ca  []byte
}

// newFixture starts a hub running the loop. With hooks, the hub is
// started as flotilla-hub starts it, with the receiver mounted on its
// listener (hubtest does not mount extra handlers).
func newFixture(t *testing.T, hooks *Hooks) *fixture {
	t.Helper()
	if err := gittest.Available(); err != nil {
		testenv.Unavailable(t, "%v (scripts/install-deps.sh installs it)", err)
	}
	g, err := gittest.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, git: g, logs: &logBuffer{}}
	log := slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	dataDir := t.TempDir()
	loops := []hub.Loop{{Name: "gitops", Run: func(ctx context.Context, rc *rest.Config) error {
		// A new loop each start, as in a new hub process.
		return New(Config{DataDir: dataDir, Log: log, Hooks: hooks}).Run(ctx, rc)
	}}}
	if hooks == nil {
		f.h = hubtest.Start(t, hubtest.Options{Log: log, Loops: loops})
		f.connect(f.h.Config)
		return f
	}
	h, err := hub.New(hub.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", RunLoops: true, Loops: loops,
		Public: map[string]http.Handler{HooksPath: hooks}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("hub: %v", err)
		}
	})
	f.url, f.ca = h.URL(), h.AdminConfig().CAData
	f.connect(h.AdminConfig())
	f.eventually("the hub answers", func() (bool, string) {
		_, err := f.kube.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	return f
}

func (f *fixture) connect(rc *rest.Config) {
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		f.t.Fatal(err)
	}
	f.dyn = dyn
	f.kube = kubernetes.NewForConfigOrDie(rc)
}

func (f *fixture) commit(msg string, files map[string]string, remove ...string) string {
	f.t.Helper()
	if err := f.git.Write(files); err != nil {
		f.t.Fatal(err)
	}
	if err := f.git.Remove(remove...); err != nil {
		f.t.Fatal(err)
	}
	c, err := f.git.Commit(msg)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

func (f *fixture) createSource(name string, mutate func(*v1alpha1.GitSource)) {
	f.t.Helper()
	gs := &v1alpha1.GitSource{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: v1alpha1.GitSourceSpec{
		URL: f.git.URL, Ref: v1alpha1.GitRef{Branch: "main"}, Interval: &metav1.Duration{Duration: time.Second},
	}}
	if mutate != nil {
		mutate(gs)
	}
	u, err := toUnstructured(gs)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.dyn.Resource(gvr).Namespace("default").Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) source(name string) *v1alpha1.GitSource {
	f.t.Helper()
	u, err := f.dyn.Resource(gvr).Namespace("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	gs, err := fromUnstructured(u)
	if err != nil {
		f.t.Fatal(err)
	}
	return gs
}

// eventually polls cond until it holds; the deadline only bounds a hung
// test, it asserts nothing about speed.
func (f *fixture) eventually(what string, cond func() (bool, string)) {
	f.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(50 * time.Millisecond)
	}
	f.t.Fatalf("%s: never happened; last state: %s", what, last)
}

func (f *fixture) waitApplied(name, commit string) *v1alpha1.GitSource {
	f.t.Helper()
	var gs *v1alpha1.GitSource
	f.eventually("source "+name+" applies "+commit, func() (bool, string) {
		gs = f.source(name)
		return gs.Status.LastAppliedCommit == commit, fmt.Sprintf("applied %s, message %q", gs.Status.LastAppliedCommit, gs.Status.Message)
	})
	return gs
}

func (f *fixture) configMap(ns, name string) (*corev1.ConfigMap, error) {
	return f.kube.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
}

const (
	nsShop  = "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n"
	cmColor = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: shop}\ndata: {color: %s}\n"
	cmOther = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other, namespace: shop}\n"
)

func TestFollowsCommits(t *testing.T) {
	f := newFixture(t, nil)
	c1 := f.commit("one", map[string]string{
		"clusters/shop/ns.yaml":    nsShop,
		"clusters/shop/app.yaml":   fmt.Sprintf(cmColor, "blue"),
		"clusters/shop/other.yaml": cmOther,
		"clusters/elsewhere.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: elsewhere}\n",
	})
	f.createSource("shops", func(gs *v1alpha1.GitSource) { gs.Spec.Paths = []string{"clusters/shop"} })
	gs := f.waitApplied("shops", c1)
	cm, err := f.configMap("shop", "app")
	if err != nil || cm.Data["color"] != "blue" || cm.Labels[api.LabelSource] != "default.shops" || cm.Annotations[api.AnnotationSourceCommit] != c1 {
		t.Fatalf("app: %v %v", cm, err)
	}
	if _, err := f.configMap("default", "elsewhere"); !apierrors.IsNotFound(err) {
		t.Errorf("an object outside spec.paths was applied: %v", err)
	}
	if len(gs.Status.Inventory) != 3 || len(gs.Status.History) != 1 || gs.Status.History[0].Created != 3 {
		t.Errorf("status after the first commit: inventory %v history %+v", gs.Status.Inventory, gs.Status.History)
	}
	if c := findCondition(gs.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v", c)
	}

	// A change is applied.
	c2 := f.commit("two", map[string]string{"clusters/shop/app.yaml": fmt.Sprintf(cmColor, "red")})
	gs = f.waitApplied("shops", c2)
	if cm, _ := f.configMap("shop", "app"); cm.Data["color"] != "red" {
		t.Fatalf("color = %s", cm.Data["color"])
	}
	if h := gs.Status.History[0]; h.Updated != 1 || h.Unchanged != 2 || h.Commit != c2 || h.Result != ResultSucceeded {
		t.Errorf("history[0] = %+v", h)
	}

	// A removed file is pruned.
	c3 := f.commit("three", nil, "clusters/shop/other.yaml")
	gs = f.waitApplied("shops", c3)
	if _, err := f.configMap("shop", "other"); !apierrors.IsNotFound(err) {
		t.Fatalf("other not pruned: %v", err)
	}
	if gs.Status.History[0].Pruned != 1 || len(gs.Status.Inventory) != 2 {
		t.Errorf("status: %+v inventory %v", gs.Status.History[0], gs.Status.Inventory)
	}

	// A hand edit is put back at the next poll.
	cm, _ = f.configMap("shop", "app")
	cm.Data["color"] = "hand-edited"
	cm.Labels["owner"] = "ops"
	if _, err := f.kube.CoreV1().ConfigMaps("shop").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("the hand edit is reverted", func() (bool, string) {
		cm, _ := f.configMap("shop", "app")
		return cm.Data["color"] == "red", fmt.Sprint(cm.Data)
	})
	if cm, _ := f.configMap("shop", "app"); cm.Labels["owner"] != "ops" {
		t.Errorf("a label set by someone else was removed: %v", cm.Labels)
	}

	// A hub restart re-applies nothing that is unchanged. A hand edit
	// made while the hub is down shows when the restarted loop has
	// reconciled.
	rvs := map[string]string{}
	for _, n := range []string{"app"} {
		cm, _ := f.configMap("shop", n)
		rvs[n] = cm.ResourceVersion
	}
	ns, _ := f.kube.CoreV1().Namespaces().Get(context.Background(), "shop", metav1.GetOptions{})
	nsRV := ns.ResourceVersion
	if err := f.git.Write(map[string]string{}); err != nil {
		t.Fatal(err)
	}
	f.h = f.h.Restart()
	f.connect(f.h.Config)
	// Drift in a new object created by hand, owned by the source: an
	// edit of the Namespace's labels that the loop must revert.
	ns, _ = f.kube.CoreV1().Namespaces().Get(context.Background(), "shop", metav1.GetOptions{})
	if ns.ResourceVersion != nsRV {
		t.Fatalf("the namespace changed across the restart")
	}
	cm, _ = f.configMap("shop", "app")
	cm.Data["color"] = "edited-while-restarting"
	upd, err := f.kube.CoreV1().ConfigMaps("shop").Update(context.Background(), cm, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.eventually("the restarted loop reverts the edit", func() (bool, string) {
		cm, _ := f.configMap("shop", "app")
		return cm.Data["color"] == "red" && cm.ResourceVersion != upd.ResourceVersion, fmt.Sprint(cm.Data)
	})
	ns, _ = f.kube.CoreV1().Namespaces().Get(context.Background(), "shop", metav1.GetOptions{})
	if ns.ResourceVersion != nsRV {
		t.Errorf("the restarted hub rewrote the unchanged Namespace: rv %s → %s", nsRV, ns.ResourceVersion)
	}
	if gs := f.source("shops"); gs.Status.LastAppliedCommit != c3 {
		t.Errorf("lastAppliedCommit after restart = %s", gs.Status.LastAppliedCommit)
	}
}

func TestBrokenCommitsKeepTheLastGoodOne(t *testing.T) {
	f := newFixture(t, nil)
	good := f.commit("good", map[string]string{"ns.yaml": nsShop, "app.yaml": fmt.Sprintf(cmColor, "blue")})
	f.createSource("shops", nil)
	f.waitApplied("shops", good)

	check := func(commit, file string, line int, msgPart string) {
		t.Helper()
		var gs *v1alpha1.GitSource
		f.eventually("commit "+commit+" is refused", func() (bool, string) {
			gs = f.source("shops")
			return gs.Status.LastAttemptedCommit == commit && len(gs.Status.Errors) > 0, gs.Status.Message
		})
		if gs.Status.LastAppliedCommit != good {
			t.Errorf("lastAppliedCommit = %s, want the last good %s", gs.Status.LastAppliedCommit, good)
		}
		ready := findCondition(gs.Status.Conditions, v1alpha1.ConditionReady)
		stalled := findCondition(gs.Status.Conditions, v1alpha1.ConditionStalled)
		if ready.Status != metav1.ConditionFalse || ready.Reason != ReasonValidationFailed || stalled.Status != metav1.ConditionTrue {
			t.Errorf("conditions: ready %+v stalled %+v", ready, stalled)
		}
		e := gs.Status.Errors[0]
		if e.File != file || e.Line != line || !strings.Contains(e.Message, msgPart) {
			t.Errorf("errors = %+v, want %s:%d %q", gs.Status.Errors, file, line, msgPart)
		}
		if !strings.Contains(gs.Status.Message, fmt.Sprintf("%s:%d", file, line)) {
			t.Errorf("message %q does not name %s:%d", gs.Status.Message, file, line)
		}
		if h := gs.Status.History[0]; h.Result != ResultFailed || h.Commit != commit {
			t.Errorf("history[0] = %+v", h)
		}
		if cm, _ := f.configMap("shop", "app"); cm.Data["color"] != "blue" {
			t.Errorf("a refused commit changed the object: %v", cm.Data)
		}
		if _, err := f.configMap("shop", "new"); !apierrors.IsNotFound(err) {
			t.Errorf("a refused commit created an object: %v", err)
		}
	}

	// Broken YAML beside a good change: nothing is applied.
	bad := f.commit("broken yaml", map[string]string{
		"app.yaml":  fmt.Sprintf(cmColor, "green"),
		"new.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: new, namespace: shop}\n",
		"oops.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  namespace: shop\ndata: [unclosed\n",
	})
	check(bad, "oops.yaml", 6, "invalid YAML")

	// A schema error the server refuses in its dry run (422).
	schema := f.commit("schema error", map[string]string{
		"oops.yaml": "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\nspec:\n  ports: [{port: 99999}]\n",
	})
	check(schema, "oops.yaml", 1, "99999")

	// The next good commit applies.
	fixed := f.commit("fixed", nil, "oops.yaml")
	gs := f.waitApplied("shops", fixed)
	if cm, _ := f.configMap("shop", "app"); cm.Data["color"] != "green" {
		t.Errorf("the fixed commit was not applied: %v", cm.Data)
	}
	if len(gs.Status.Errors) != 0 || findCondition(gs.Status.Conditions, v1alpha1.ConditionStalled).Status != metav1.ConditionFalse {
		t.Errorf("status after the fix: %+v", gs.Status)
	}
}

func TestKustomizeOverlay(t *testing.T) {
	f := newFixture(t, nil)
	c := f.commit("kustomize", map[string]string{
		"base/kustomization.yaml":          "resources: [cm.yaml]\n",
		"base/cm.yaml":                     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {color: blue}\n",
		"overlays/shop/kustomization.yaml": "namespace: default\nnamePrefix: shop-\nresources: [../../base]\npatches: [{path: patch.yaml}]\n",
		"overlays/shop/patch.yaml":         "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {color: red}\n",
	})
	f.createSource("overlay", func(gs *v1alpha1.GitSource) { gs.Spec.Paths = []string{"overlays/shop"} })
	f.waitApplied("overlay", c)
	cm, err := f.configMap("default", "shop-app")
	if err != nil || cm.Data["color"] != "red" {
		t.Fatalf("shop-app: %v %v", cm, err)
	}
}

func TestSignedCommits(t *testing.T) {
	testenv.RequireTool(t, "gpg", "apt-get install -y gnupg")
	f := newFixture(t, nil)
	genv, fpr, pub := gpgKey(t)
	f.git.Env = genv
	if _, err := f.kube.CoreV1().Secrets("default").Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "trusted"}, Data: map[string][]byte{"team.asc": pub}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.git.Write(map[string]string{"app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: signed}\ndata: {v: \"1\"}\n"}); err != nil {
		t.Fatal(err)
	}
	signed, err := f.git.Commit("signed", "--gpg-sign="+fpr)
	if err != nil {
		t.Fatal(err)
	}
	f.createSource("signed", func(gs *v1alpha1.GitSource) {
		gs.Spec.Verify = &v1alpha1.GitVerification{Mode: "head", SecretRef: v1alpha1.LocalObjectReference{Name: "trusted"}}
	})
	f.waitApplied("signed", signed)

	unsigned := f.commit("unsigned", map[string]string{"app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: signed}\ndata: {v: \"2\"}\n"})
	var gs *v1alpha1.GitSource
	f.eventually("the unsigned commit is refused", func() (bool, string) {
		gs = f.source("signed")
		r := findCondition(gs.Status.Conditions, v1alpha1.ConditionReady)
		return gs.Status.LastAttemptedCommit == unsigned && r != nil && r.Reason == ReasonVerificationFailed, gs.Status.Message
	})
	if gs.Status.LastAppliedCommit != signed || !strings.Contains(gs.Status.Message, "not signed") {
		t.Errorf("status: applied %s message %q", gs.Status.LastAppliedCommit, gs.Status.Message)
	}
	if cm, _ := f.configMap("default", "signed"); cm.Data["v"] != "1" {
		t.Errorf("the unsigned commit was applied: %v", cm.Data)
	}
}

func gpgKey(t *testing.T) (env []string, fpr string, armored []byte) {
	t.Helper()
	home, err := os.MkdirTemp("", "gpg")
	if err != nil {
		t.Fatal(err)
	}
	env = []string{"GNUPGHOME=" + home}
	t.Cleanup(func() {
		kill := exec.Command("gpgconf", "--kill", "gpg-agent")
		kill.Env = append(os.Environ(), env...)
		_ = kill.Run()
		os.RemoveAll(home)
	})
	run := func(args ...string) []byte {
		cmd := exec.Command("gpg", append([]string{"--batch", "--pinentry-mode", "loopback", "--passphrase", ""}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("gpg %v: %v", args, err)
		}
		return out
	}
	run("--quick-gen-key", "Flotilla Test <t@e>", "ed25519", "sign", "never")
	for _, line := range strings.Split(string(run("--with-colons", "--list-keys", "t@e")), "\n") {
		if strings.HasPrefix(line, "fpr:") {
			fpr = strings.Split(line, ":")[9]
			break
		}
	}
	return env, fpr, run("--armor", "--export", "t@e")
}

func TestWebhookAndNoSecretsShown(t *testing.T) {
	f := newFixture(t, NewHooks())
	const token = "webhook-token-0123456789"
	const secretValue = "manifest-secret-value-abcdef"
	const credValue = "https-password-zyxwvu"
	ctx := context.Background()
	for name, data := range map[string]map[string][]byte{
		"hook":  {WebhookTokenKey: []byte(token)},
		"creds": {"username": []byte("fleet"), "password": []byte(credValue)},
	} {
		if _, err := f.kube.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c1 := f.commit("one", map[string]string{
		"secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: app-secret}\nstringData: {password: " + secretValue + "}\n",
	})
	f.createSource("hooked", func(gs *v1alpha1.GitSource) {
		gs.Spec.Interval = &metav1.Duration{Duration: time.Hour}
		gs.Spec.WebhookSecretRef = &v1alpha1.LocalObjectReference{Name: "hook"}
		gs.Spec.SecretRef = &v1alpha1.LocalObjectReference{Name: "creds"}
	})
	f.waitApplied("hooked", c1)

	// The receiver, as the hub mounts it, unauthenticated.
	srv := f.url
	c2 := f.commit("two", map[string]string{
		"secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: app-secret}\nstringData: {password: " + secretValue + "2}\n",
		"cm.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: hooked}\n",
	})
	body := []byte(`{"ref":"refs/heads/main","after":"` + c2 + `"}`)
	post := func(sig string) int {
		req, _ := http.NewRequest(http.MethodPost, srv+HooksPath+"default/hooked", bytes.NewReader(body))
		if sig != "" {
			req.Header.Set("X-Hub-Signature-256", sig)
		}
		req.Header.Set("X-GitHub-Event", "push")
		resp, err := hookClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("sha256=" + strings.Repeat("00", 32)); code != http.StatusForbidden {
		t.Fatalf("a bad signature got %d", code)
	}
	if code := post(""); code != http.StatusForbidden {
		t.Fatalf("no signature got %d", code)
	}
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write(body)
	if code := post("sha256=" + hex.EncodeToString(mac.Sum(nil))); code != http.StatusAccepted {
		t.Fatalf("a good signature got %d", code)
	}
	// The interval is an hour: only the webhook can have started this.
	f.waitApplied("hooked", c2)

	// No secret in status, Events or logs.
	gs := f.source("hooked")
	st, _ := json.Marshal(gs)
	evs, err := f.kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evJSON, _ := json.Marshal(evs)
	s, _ := f.kube.CoreV1().Secrets("default").Get(ctx, "app-secret", metav1.GetOptions{})
	meta, _ := json.Marshal(s.ObjectMeta)
	for what, text := range map[string]string{"status": string(st), "events": string(evJSON), "logs": f.logs.String(), "secret metadata": string(meta)} {
		for _, secret := range []string{token, secretValue, credValue} {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows the secret %q", what, secret)
			}
		}
	}
	if !strings.Contains(string(evJSON), "applied commit") {
		t.Errorf("no Event says what was applied: %s", evJSON)
	}
}

var hookClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

func TestDeletingASource(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	c := f.commit("one", map[string]string{
		"kept.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kept}\n",
	})
	f.createSource("orphaning", nil)
	f.waitApplied("orphaning", c)
	g2, err := gittest.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.Write(map[string]string{"gone.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: gone}\n"}); err != nil {
		t.Fatal(err)
	}
	c2, err := g2.Commit("two")
	if err != nil {
		t.Fatal(err)
	}
	f.createSource("pruning", func(gs *v1alpha1.GitSource) { gs.Spec.URL = g2.URL; gs.Spec.PruneOnDelete = true })
	f.waitApplied("pruning", c2)
	f.eventually("the finalizer is added", func() (bool, string) {
		gs := f.source("pruning")
		return len(gs.Finalizers) == 1 && gs.Finalizers[0] == Finalizer, fmt.Sprint(gs.Finalizers)
	})

	for _, n := range []string{"orphaning", "pruning"} {
		if err := f.dyn.Resource(gvr).Namespace("default").Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.eventually("the pruning source is gone", func() (bool, string) {
		_, err := f.dyn.Resource(gvr).Namespace("default").Get(ctx, "pruning", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if _, err := f.configMap("default", "gone"); !apierrors.IsNotFound(err) {
		t.Errorf("pruneOnDelete left the object: %v", err)
	}
	if _, err := f.configMap("default", "kept"); err != nil {
		t.Errorf("deleting a source without pruneOnDelete deleted its object: %v", err)
	}
}

func TestSuspendedSourceIsNotPolled(t *testing.T) {
	f := newFixture(t, nil)
	c1 := f.commit("one", map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {v: \"1\"}\n"})
	f.createSource("s", nil)
	f.waitApplied("s", c1)
	gs := f.source("s")
	gs.Spec.Suspend = true
	u, _ := toUnstructured(gs)
	if _, err := f.dyn.Resource(gvr).Namespace("default").Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("the suspension is observed", func() (bool, string) {
		gs := f.source("s")
		c := findCondition(gs.Status.Conditions, v1alpha1.ConditionReconciling)
		return c != nil && c.Reason == ReasonSuspended, gs.Status.Message
	})
	f.commit("two", map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {v: \"2\"}\n"})
	// Resume: the new commit applies; while suspended it was not.
	if cm, _ := f.configMap("default", "a"); cm.Data["v"] != "1" {
		t.Fatalf("applied while suspended: %v", cm.Data)
	}
	gs = f.source("s")
	gs.Spec.Suspend = false
	u, _ = toUnstructured(gs)
	if _, err := f.dyn.Resource(gvr).Namespace("default").Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("the new commit applies after resuming", func() (bool, string) {
		cm, _ := f.configMap("default", "a")
		return cm.Data["v"] == "2", fmt.Sprint(cm.Data)
	})
}
