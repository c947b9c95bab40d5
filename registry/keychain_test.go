package registry

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"flotilla.dev/flotilla/test/testimage"
)

func TestParseDockerConfig(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString([]byte("fleet:s3:cret"))
	k, err := ParseDockerConfig([]byte(`{"auths": {
		"https://index.docker.io/v1/": {"auth": "` + b64 + `"},
		"registry.local:5000": {"username": "u", "password": "p"},
		"https://*.example.com/team": {"identitytoken": "tok"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]Auth{
		"docker.io":            {Username: "fleet", Password: "s3:cret"},
		"registry-1.docker.io": {Username: "fleet", Password: "s3:cret"},
		"registry.local:5000":  {Username: "u", Password: "p"},
		"eu.example.com":       {IdentityToken: "tok"},
	} {
		if got, ok := k.Lookup(host); !ok || got != want {
			t.Errorf("Lookup(%s) = %+v %v, want %+v", host, got, ok, want)
		}
	}
	// One label per wildcard, and a port must match as written.
	for _, host := range []string{"a.eu.example.com", "example.com", "registry.local", "eu.example.com:443"} {
		if got, ok := k.Lookup(host); ok {
			t.Errorf("Lookup(%s) = %+v, want none", host, got)
		}
	}
	if u, s := (Auth{Username: "u", Password: "p", IdentityToken: "t"}).pair(); u != "" || s != "t" {
		t.Errorf("an identity token is used instead of the password: %q %q", u, s)
	}

	// The older .dockercfg has no "auths" wrapper.
	old, err := ParseDockerConfig([]byte(`{"registry.local": {"auth": "` + b64 + `", "email": "x@y"}}`))
	if err != nil || old["registry.local"].Username != "fleet" {
		t.Fatalf("dockercfg: %+v %v", old, err)
	}

	for name, c := range map[string]struct{ data, want string }{
		"not JSON":     {`auths:`, "not a JSON object"},
		"auths array":  {`{"auths": []}`, `"auths" is not an object`},
		"entry string": {`{"auths": {"r": "x"}}`, `registry "r"`},
		"bad base64":   {`{"auths": {"r": {"auth": "%%%"}}}`, "not base64"},
		"no colon":     {`{"auths": {"r": {"auth": "` + base64.StdEncoding.EncodeToString([]byte("token")) + `"}}}`, "username:password"},
		"no user":      {`{"auths": {"r": {"password": "p"}}}`, "no username"},
		"no host":      {`{"auths": {"https:///v1/": {"username": "u"}}}`, "names no registry host"},
	} {
		if _, err := ParseDockerConfig([]byte(c.data)); !errors.Is(err, ErrInvalidDockerConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}

	merged := Keychain{"a": {Username: "first"}}.Merge(Keychain{"a": {Username: "second"}, "b": {Username: "b"}})
	if merged["a"].Username != "first" || merged["b"].Username != "b" {
		t.Errorf("merge: %+v", merged)
	}
	if (Keychain{}).fingerprint() != "" || merged.fingerprint() == (Keychain{"a": {Username: "other"}}).fingerprint() {
		t.Error("fingerprints do not tell credentials apart")
	}
}

// A pull's keychain is tried before the configuration's credentials, and
// read only when the registry asks for credentials.
func TestKeychainBeforeConfig(t *testing.T) {
	f, host := newFake(t, "fleet", "s3cret")
	cfg := Config{Hosts: map[string]HostConfig{host: {Username: "fleet", Password: "wrong"}}}
	var calls atomic.Int32
	resolve := func(keys Keychain) error {
		hosts := cfg.withKeychain(cfg.RegistryHosts(), func() Keychain { calls.Add(1); return keys })
		_, _, err := docker.NewResolver(docker.ResolverOptions{Hosts: hosts}).Resolve(context.Background(), host+"/app:v1")
		return err
	}
	if err := resolve(Keychain{host: {Username: "fleet", Password: "s3cret"}}); err != nil {
		t.Fatalf("with the pod's credentials: %v", err)
	}
	if calls.Load() == 0 {
		t.Fatal("the keychain was never asked")
	}
	if err := resolve(Keychain{"elsewhere:5000": {Username: "fleet", Password: "s3cret"}}); err == nil {
		t.Fatal("resolved with the configuration's wrong password")
	}

	open, ohost := newFake(t, "", "")
	_ = open
	calls.Store(0)
	hosts := cfg.withKeychain(cfg.RegistryHosts(), func() Keychain { calls.Add(1); return nil })
	if _, _, err := docker.NewResolver(docker.ResolverOptions{Hosts: hosts}).Resolve(context.Background(), ohost+"/app:v1"); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 0 || f == nil {
		t.Fatalf("a registry that asks for nothing read the keychain %d times", calls.Load())
	}
}

// basicAuthProxy puts HTTP basic authentication in front of a registry.
func basicAuthProxy(t *testing.T, upstream, user, pass string) string {
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="fleet"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// An image behind authentication pulls with the pod's image pull secret
// into real containerd, and not without it.
func TestPullWithKeychain(t *testing.T) {
	client, ns := testimage.Containerd(t)
	reg := testimage.SharedRegistry(t)
	img, err := testimage.BuildImage(reg, "private", testimage.AppPackage, testimage.Options{Env: []string{"X=private"}})
	if err != nil {
		t.Fatal(err)
	}
	host := basicAuthProxy(t, reg.URL(), "fleet", "s3cret")
	ref := host + strings.TrimPrefix(img.Ref, reg.Host)
	p, err := NewPuller(client, PullerConfig{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.Pull(ctx, ref); err == nil {
		t.Fatal("pulled without credentials")
	}
	keys, err := ParseDockerConfig([]byte(`{"auths": {"http://` + host + `/v2/": {"auth": "` + base64.StdEncoding.EncodeToString([]byte("fleet:s3cret")) + `"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Pull(ctx, ref, WithKeychain(keys))
	if err != nil {
		t.Fatalf("with the pull secret: %v", err)
	}
	if ok, err := got.Image.IsUnpacked(namespaces.WithNamespace(ctx, ns), DefaultSnapshotter); !got.Fetched || err != nil || !ok {
		t.Fatalf("pulled %+v, unpacked %v %v", got, ok, err)
	}
}
