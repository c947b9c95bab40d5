package controller

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/internal/testenv"
)

// scripts/git-hook-notify-hub.sh, the post-receive hook make demo installs,
// signs its call as the receiver checks it: a push reaches the hub at once.
func TestPushHookCallsTheWebhook(t *testing.T) {
	testenv.RequireTools(t, "the push hook calls it", "openssl", "curl")
	f := newFixture(t, NewHooks())
	const token = "push-hook-token-42"
	if _, err := f.kube.CoreV1().Secrets("default").Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook"},
		StringData: map[string]string{WebhookTokenKey: token}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c1 := f.commit("one", configMapA("1"))
	// An hour between polls: only the webhook can fetch the later commits.
	f.createSource("pushed", func(gs *v1alpha1.GitSource) {
		gs.Spec.Interval = &metav1.Duration{Duration: time.Hour}
		gs.Spec.WebhookSecretRef = &v1alpha1.LocalObjectReference{Name: "hook"}
	})
	f.waitApplied("pushed", c1)

	dir := t.TempDir()
	tokenFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	hook, err := os.ReadFile(filepath.Join("..", "..", "scripts", "git-hook-notify-hub.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for path, data := range map[string][]byte{tokenFile: []byte(token), caFile: f.ca, filepath.Join(f.git.Bare, "hooks", "post-receive"): hook} {
		if err := os.WriteFile(path, data, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range map[string]string{"webhookUrl": f.url + HooksPath + "default/pushed", "webhookTokenFile": tokenFile, "webhookCAFile": caFile} {
		if out, err := exec.Command("git", "-C", f.git.Bare, "config", "flotilla."+k, v).CombinedOutput(); err != nil {
			t.Fatalf("git config: %v %s", err, out)
		}
	}
	push := func(msg, v string) (string, string) {
		t.Helper()
		if err := f.git.Write(configMapA(v)); err != nil {
			t.Fatal(err)
		}
		if _, err := f.git.Git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qam", msg); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("git", "push", "-q", "origin", "main")
		cmd.Dir = f.git.Work
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git push: %v\n%s", err, out)
		}
		c, err := f.git.Git("rev-parse", "HEAD")
		if err != nil {
			t.Fatal(err)
		}
		return c, string(out)
	}

	c2, out := push("two", "2")
	if !strings.Contains(out, "flotilla: the hub fetches refs/heads/main now") {
		t.Errorf("the hook's output:\n%s", out)
	}
	f.waitApplied("pushed", c2)

	// A wrong token: the push goes through, the hook says the hub refused.
	if err := os.WriteFile(tokenFile, []byte("not-the-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, out = push("three", "3")
	if !strings.Contains(out, "the hub did not take the webhook for refs/heads/main") || !strings.Contains(out, ": 403)") {
		t.Errorf("the hook's output with a wrong token:\n%s", out)
	}
	if gs := f.source("pushed"); gs.Status.LastAttemptedCommit != c2 {
		t.Errorf("a refused webhook fetched %s", gs.Status.LastAttemptedCommit)
	}
}
