package ctl

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestKubeconfigPrecedence(t *testing.T) {
	env := map[string]string{"HOME": "/home/ops", "KUBECONFIG": "/a:/b", "FLOTILLA_KUBECONFIG": "/flotilla"}
	for _, tc := range []struct {
		flag string
		drop []string
		want string
	}{
		{"/flag", nil, "/flag"},
		{"", nil, "/flotilla"},
		{"", []string{"FLOTILLA_KUBECONFIG"}, "/a /b"},
		{"", []string{"FLOTILLA_KUBECONFIG", "KUBECONFIG"}, "/home/ops/.flotilla/config"},
	} {
		e := map[string]string{}
		for k, v := range env {
			e[k] = v
		}
		for _, d := range tc.drop {
			delete(e, d)
		}
		if got := strings.Join(KubeconfigPath(tc.flag, envOf(e)), " "); got != tc.want {
			t.Errorf("flag %q without %v: %q, want %q", tc.flag, tc.drop, got, tc.want)
		}
	}
}

const kubeconfig = `apiVersion: v1
kind: Config
current-context: hub
contexts:
- name: hub
  context: {cluster: hub, user: admin, namespace: shop}
- name: other
  context: {cluster: other, user: admin}
clusters:
- name: hub
  cluster: {server: "https://127.0.0.1:6443"}
- name: other
  cluster: {server: "https://10.0.0.9:6443"}
users:
- name: admin
  user: {token: x}
`

func TestRESTConfigContextAndNamespace(t *testing.T) {
	home := t.TempDir()
	path := filepath.Join(home, ".flotilla", "config")
	os.MkdirAll(filepath.Dir(path), 0o700)
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	env := envOf(map[string]string{"HOME": home})

	cfg, ns, err := (&ConfigFlags{}).RESTConfig(env)
	if err != nil || cfg.Host != "https://127.0.0.1:6443" || ns != "shop" {
		t.Errorf("default: %v %q %v", cfg, ns, err)
	}
	cfg, ns, err = (&ConfigFlags{Context: "other", Namespace: "kiosks"}).RESTConfig(env)
	if err != nil || cfg.Host != "https://10.0.0.9:6443" || ns != "kiosks" {
		t.Errorf("--context other -n kiosks: %v %q %v", cfg, ns, err)
	}
	if _, _, err := (&ConfigFlags{Context: "nope"}).RESTConfig(env); err == nil {
		t.Error("unknown context accepted")
	}
	_, _, err = (&ConfigFlags{}).RESTConfig(envOf(map[string]string{"HOME": t.TempDir()}))
	if !errors.Is(err, errNoConfig) || !strings.Contains(err.Error(), "admin.kubeconfig") {
		t.Errorf("no config: %v", err)
	}
	if _, _, err := (&ConfigFlags{Kubeconfig: filepath.Join(home, "missing")}).RESTConfig(env); err == nil {
		t.Error("missing --kubeconfig file accepted")
	}
}

func TestErrorMessages(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{apierrors.NewNotFound(gr, "x"), `Error from server (NotFound): pods "x" not found`},
		{fmt.Errorf("getting: %w", apierrors.NewConflict(gr, "x", errors.New("stale"))), `Error from server (Conflict): Operation cannot be fulfilled on pods "x": stale`},
		{apierrors.NewUnauthorized("no certificate"), "error: You must be logged in to the server (no certificate)"},
		{&url.Error{Op: "Get", URL: "https://127.0.0.1:6443/api", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}},
			"The connection to the server 127.0.0.1:6443 was refused - is the hub running, and is this the right address?"},
		{errors.New("boom"), "error: boom"},
	} {
		if got := ErrorMessage(tc.err); got != tc.want {
			t.Errorf("%v:\n got %q\nwant %q", tc.err, got, tc.want)
		}
	}
}
