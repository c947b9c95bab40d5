package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// fakeRegistry serves one manifest for repository "app" under tag "v1" and
// its digest, optionally behind basic auth.
type fakeRegistry struct {
	manifest   []byte
	user, pass string
	hits       atomic.Int32
}

func (f *fakeRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.hits.Add(1)
	if f.user != "" {
		if u, p, ok := r.BasicAuth(); !ok || u != f.user || p != f.pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
	}
	d := digest.FromBytes(f.manifest).String()
	switch r.URL.Path {
	case "/v2/", "/v2":
		w.WriteHeader(http.StatusOK)
	case "/v2/app/manifests/v1", "/v2/app/manifests/" + d:
		w.Header().Set("Content-Type", ocispec.MediaTypeImageManifest)
		w.Header().Set("Docker-Content-Digest", d)
		w.Header().Set("Content-Length", fmt.Sprint(len(f.manifest)))
		if r.Method == http.MethodGet {
			w.Write(f.manifest)
		}
	default:
		http.NotFound(w, r)
	}
}

func newFake(t *testing.T, user, pass string) (*fakeRegistry, string) {
	f := &fakeRegistry{manifest: []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"layers":[]}`), user: user, pass: pass}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, strings.TrimPrefix(srv.URL, "http://")
}

func TestResolveWithCredentialsOverPlainHTTP(t *testing.T) {
	f, host := newFake(t, "fleet", "s3cret")
	want := digest.FromBytes(f.manifest)
	cfg := Config{Hosts: map[string]HostConfig{host: {Username: "fleet", Password: "s3cret"}}}
	_, desc, err := cfg.Resolver().Resolve(context.Background(), host+"/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != want {
		t.Fatalf("digest = %s, want %s", desc.Digest, want)
	}
	bad := Config{Hosts: map[string]HostConfig{host: {Username: "fleet", Password: "wrong"}}}
	if _, _, err := bad.Resolver().Resolve(context.Background(), host+"/app:v1"); err == nil {
		t.Fatal("wrong password resolved")
	}
}

func TestResolveThroughMirror(t *testing.T) {
	mirror, mhost := newFake(t, "", "")
	// The upstream cannot be reached at all: only the mirror can answer.
	cfg := Config{Hosts: map[string]HostConfig{"registry.invalid": {Mirrors: []string{"http://" + mhost}}}}
	d := digest.FromBytes(mirror.manifest)
	_, desc, err := cfg.Resolver().Resolve(context.Background(), "registry.invalid/app@"+d.String())
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != d || mirror.hits.Load() == 0 {
		t.Fatalf("digest %s, mirror hits %d", desc.Digest, mirror.hits.Load())
	}
}

func TestRegistryHosts(t *testing.T) {
	cfg := Config{Hosts: map[string]HostConfig{
		"docker.io":      {Mirrors: []string{"mirror.local:5000", "http://10.0.0.5/cache"}},
		"registry.local": {PlainHTTP: true},
	}}
	hosts, err := cfg.RegistryHosts()("docker.io")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(hosts))
	for i, h := range hosts {
		got[i] = h.Scheme + "://" + h.Host + h.Path
	}
	want := []string{"https://mirror.local:5000/v2", "http://10.0.0.5/cache/v2", "https://registry-1.docker.io/v2"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("hosts = %v, want %v", got, want)
	}
	if hosts[0].Capabilities.Has(docker.HostCapabilityPush) || !hosts[2].Capabilities.Has(docker.HostCapabilityPush) {
		t.Fatal("mirrors must not be push targets; the registry must")
	}
	for host, scheme := range map[string]string{"registry.local": "http", "localhost:5000": "http", "127.0.0.1:5000": "http", "[::1]:5000": "http", "example.com": "https"} {
		hs, _ := cfg.RegistryHosts()(host)
		if len(hs) != 1 || hs[0].Scheme != scheme {
			t.Errorf("%s: scheme %s, want %s", host, hs[0].Scheme, scheme)
		}
	}
}

func TestValidate(t *testing.T) {
	err := Config{Hosts: map[string]HostConfig{
		"a.local": {Mirrors: []string{"ftp://x"}},
		"b.local": {CAFile: "/does/not/exist.pem"},
		"c/d":     {},
	}}.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{`"a.local"`, `"b.local"`, `"c/d"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
	if err := (Config{Hosts: map[string]HostConfig{"a.local": {Mirrors: []string{"https://m.local"}}}}).Validate(); err != nil {
		t.Fatal(err)
	}
}
