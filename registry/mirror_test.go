package registry

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func deadHost(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := ln.Addr().String()
	ln.Close()
	return host
}

// A mirror that is down falls through to the next mirror, for resolving
// and for fetching content, with the upstream unreachable too.
func TestMirrorFallsThrough(t *testing.T) {
	live, lhost := newFake(t, "", "")
	cfg := Config{Hosts: map[string]HostConfig{"registry.invalid": {Mirrors: []string{"http://" + deadHost(t), "http://" + lhost}}}}
	d := digest.FromBytes(live.manifest)
	r := cfg.Resolver()
	name, desc, err := r.Resolve(context.Background(), "registry.invalid/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != d {
		t.Fatalf("digest %s, want %s", desc.Digest, d)
	}
	f, err := r.Fetcher(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := f.Fetch(context.Background(), ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: d, Size: int64(len(live.manifest))})
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	// Every mirror down and no upstream: the error names the last host.
	none := Config{Hosts: map[string]HostConfig{"registry.invalid": {Mirrors: []string{"http://" + deadHost(t)}}}}
	if _, _, err := none.Resolver().Resolve(context.Background(), "registry.invalid/app:v1"); err == nil {
		t.Fatal("resolved with every host down")
	}
}

func TestCredentialsFile(t *testing.T) {
	_, host := newFake(t, "fleet", "s3cret")
	dir := t.TempDir()
	file := filepath.Join(dir, "creds")
	os.WriteFile(file, []byte("fleet:s3cret\n"), 0o600)
	cfg := Config{Hosts: map[string]HostConfig{host: {CredentialsFile: file}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r := cfg.Resolver()
	if _, _, err := r.Resolve(context.Background(), host+"/app:v1"); err != nil {
		t.Fatal(err)
	}
	// Read at each authentication: a rotated file applies without restart.
	os.WriteFile(file, []byte(`{"username":"fleet","password":"wrong"}`), 0o600)
	if _, _, err := cfg.Resolver().Resolve(context.Background(), host+"/app:v1"); err == nil {
		t.Fatal("the rotated (wrong) password resolved")
	}
	os.WriteFile(file, []byte(`{"username":"fleet","password":"s3cret"}`), 0o600)
	if _, _, err := cfg.Resolver().Resolve(context.Background(), host+"/app:v1"); err != nil {
		t.Fatal(err)
	}

	for name, c := range map[string]struct {
		hc   HostConfig
		want string
	}{
		"missing file": {HostConfig{CredentialsFile: filepath.Join(dir, "none")}, "read credentials file"},
		"both":         {HostConfig{CredentialsFile: file, Username: "x"}, "excludes"},
		"no colon":     {HostConfig{CredentialsFile: write(t, dir, "a", "just-a-token")}, "username:password"},
		"bad JSON":     {HostConfig{CredentialsFile: write(t, dir, "b", "{nope")}, "not JSON"},
		"empty JSON":   {HostConfig{CredentialsFile: write(t, dir, "c", "{}")}, "no username"},
	} {
		err := Config{Hosts: map[string]HostConfig{"r.local": c.hc}}.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `"r.local"`) {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
	tok := HostConfig{CredentialsFile: write(t, dir, "tok", `{"identityToken":"t0k"}`)}
	if u, s, err := tok.credentials(); err != nil || u != "" || s != "t0k" {
		t.Fatalf("identity token: %q %q %v", u, s, err)
	}
}

func write(t *testing.T, dir, name, body string) string {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
