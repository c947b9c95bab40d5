package trust

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"flotilla.dev/flotilla/registry"
)

const repo = "registry.local:5000/team/app"

func TestVerifyBothLayoutsEveryKeyType(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []string{"p256", "p384", "ed25519", "rsa"} {
		k := newKey(t, alg+".pub", alg)
		other := newKey(t, "other.pub", "p256")
		v := mustVerifier(t, Config{Dir: trustDir(t, other, k)}, nil)
		for _, layout := range []string{"sig tag", "referrers API", "fallback tag"} {
			m := newMemRegistry()
			m.referrersAPI = layout == "referrers API"
			ref, desc := m.pushImage(repo, alg+layout)
			want := LayoutBundle
			if layout == "sig tag" {
				want = LayoutSigTag
				m.signLegacy(t, k, ref, desc.Digest, simplePayload(repo, desc.Digest))
			} else {
				m.signBundle(t, k, ref, desc, statement(desc.Digest, PredicateTypeSign), bundleOpts{viaTag: !m.referrersAPI})
			}
			vd := v.Check(ctx, ref, desc, m)
			if vd.Err != nil || !vd.Verified || vd.Key != k.name || vd.Layout != want || vd.Digest != desc.Digest || vd.Image != repo {
				t.Errorf("%s, %s: verdict %+v", alg, layout, vd)
			}
		}
	}
}

// refusal checks that err is a *SignatureError for reason whose message
// names the image, the digest and says want.
func refusal(t *testing.T, err error, reason error, ref registry.Reference, d digest.Digest, want string) {
	t.Helper()
	var se *SignatureError
	if !errors.Is(err, ErrImageSignature) || !errors.Is(err, reason) || !errors.As(err, &se) {
		t.Fatalf("err = %v, want a SignatureError for %v", err, reason)
	}
	msg := err.Error()
	for _, s := range []string{ref.Name(), d.String(), reason.Error(), want} {
		if !strings.Contains(msg, s) {
			t.Errorf("message does not say %q: %s", s, msg)
		}
	}
}

func TestRefusals(t *testing.T) {
	ctx := context.Background()
	trusted := newKey(t, "release.pub", "p256")
	stranger := newKey(t, "stranger.pub", "p256")
	v := mustVerifier(t, Config{Dir: trustDir(t, trusted)}, nil)

	t.Run("unsigned", func(t *testing.T) {
		m := newMemRegistry()
		ref, desc := m.pushImage(repo, "unsigned")
		refusal(t, v.Verify(ctx, ref, desc, m), ErrNoSignature, ref, desc.Digest, "cosign sign --key")
	})
	t.Run("unknown key, both layouts", func(t *testing.T) {
		m := newMemRegistry()
		ref, desc := m.pushImage(repo, "stranger")
		m.signLegacy(t, stranger, ref, desc.Digest, simplePayload(repo, desc.Digest))
		m.signBundle(t, stranger, ref, desc, statement(desc.Digest, PredicateTypeSign), bundleOpts{viaTag: true})
		refusal(t, v.Verify(ctx, ref, desc, m), ErrUnknownKey, ref, desc.Digest, "2 signature(s) found, none by a trusted key; trusted: release.pub (ecdsa-p256")
	})
	t.Run("signature copied from another digest", func(t *testing.T) {
		m := newMemRegistry()
		ref, desc := m.pushImage(repo, "victim")
		_, signed := m.pushImage(repo, "signed")
		m.signLegacy(t, trusted, ref, desc.Digest, simplePayload(repo, signed.Digest))
		refusal(t, v.Verify(ctx, ref, desc, m), ErrDigestMismatch, ref, desc.Digest, "release.pub) signed "+signed.Digest.String())
	})
	t.Run("bundle for another digest", func(t *testing.T) {
		m := newMemRegistry()
		m.referrersAPI = true
		ref, desc := m.pushImage(repo, "victim")
		_, signed := m.pushImage(repo, "signed")
		m.signBundle(t, trusted, ref, desc, statement(signed.Digest, PredicateTypeSign), bundleOpts{})
		refusal(t, v.Verify(ctx, ref, desc, m), ErrDigestMismatch, ref, desc.Digest, signed.Digest.String())
	})
	t.Run("tampered payload", func(t *testing.T) {
		m := newMemRegistry()
		ref, desc := m.pushImage(repo, "tampered")
		signed := simplePayload(repo, desc.Digest)
		served := []byte(strings.Replace(string(signed), `"optional":null`, `"optional":{"x":1}`, 1))
		layer := m.put(MediaTypeSimpleSigning, served)
		layer.Annotations = map[string]string{AnnotationSignature: base64.StdEncoding.EncodeToString(trusted.sign(t, signed))}
		m.tag(ref.Name(), tagFor(desc.Digest, ".sig"), m.putJSON(ocispec.MediaTypeImageManifest, map[string]any{"schemaVersion": 2, "layers": []any{layer}}))
		refusal(t, v.Verify(ctx, ref, desc, m), ErrUnknownKey, ref, desc.Digest, "none by a trusted key")
	})
	t.Run("attestation is not a signature", func(t *testing.T) {
		m := newMemRegistry()
		m.referrersAPI = true
		ref, desc := m.pushImage(repo, "attested")
		m.signBundle(t, trusted, ref, desc, statement(desc.Digest, "https://slsa.dev/provenance/v1"), bundleOpts{})
		refusal(t, v.Verify(ctx, ref, desc, m), ErrNoSignature, ref, desc.Digest, "an attestation (https://slsa.dev/provenance/v1)")
	})
	t.Run("DSSE payload type must be in-toto", func(t *testing.T) {
		m := newMemRegistry()
		m.referrersAPI = true
		ref, desc := m.pushImage(repo, "ptype")
		m.signBundle(t, trusted, ref, desc, statement(desc.Digest, PredicateTypeSign), bundleOpts{payloadType: "text/plain"})
		refusal(t, v.Verify(ctx, ref, desc, m), ErrNoSignature, ref, desc.Digest, `payload type "text/plain"`)
	})
	t.Run("keyless bundles are never trusted", func(t *testing.T) {
		m := newMemRegistry()
		m.referrersAPI = true
		ref, desc := m.pushImage(repo, "keyless")
		m.signBundle(t, trusted, ref, desc, statement(desc.Digest, PredicateTypeSign), bundleOpts{keyless: true})
		refusal(t, v.Verify(ctx, ref, desc, m), ErrUnknownKey, ref, desc.Digest, "keyless")
	})
	t.Run("registry unreachable", func(t *testing.T) {
		m := newMemRegistry()
		ref, desc := m.pushImage(repo, "gone")
		m.signLegacy(t, trusted, ref, desc.Digest, simplePayload(repo, desc.Digest))
		m.down.Store(true)
		refusal(t, v.Verify(ctx, ref, desc, m), ErrRegistryUnreachable, ref, desc.Digest, "connection refused")
	})
	t.Run("a good signature among bad ones counts", func(t *testing.T) {
		m := newMemRegistry()
		ref, desc := m.pushImage(repo, "mixed")
		_, other := m.pushImage(repo, "other")
		m.signLegacy(t, stranger, ref, desc.Digest, simplePayload(repo, desc.Digest))
		m.signLegacy(t, trusted, ref, desc.Digest, simplePayload(repo, other.Digest))
		m.signLegacy(t, trusted, ref, desc.Digest, simplePayload(repo, desc.Digest))
		if err := v.Verify(ctx, ref, desc, m); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the puller's wrapping keeps the reason", func(t *testing.T) {
		m := newMemRegistry()
		ref, desc := m.pushImage(repo, "wrapped")
		err := v.Verify(ctx, ref, desc, m)
		wrapped := errors.Join(registry.ErrUntrusted, err)
		if !errors.Is(wrapped, ErrImageSignature) || !errors.Is(wrapped, ErrNoSignature) {
			t.Fatal(wrapped)
		}
	})
}

func TestPolicyRules(t *testing.T) {
	ctx := context.Background()
	teamA := newKey(t, "team-a.pub", "p256")
	teamB := newKey(t, "team-b.pub", "ed25519")
	dir := trustDir(t, teamA, teamB)
	cfg := Config{Dir: dir, Policy: []Rule{
		{Images: "registry.local:5000/team-a/*", Keys: []string{"team-a.pub"}},
		{Images: "docker.io/library/busybox", Unverified: true},
		{Images: "registry.local:5000/legacy/*", Keys: []string{"retired.pub"}},
	}}
	v := mustVerifier(t, cfg, nil)
	m := newMemRegistry()
	refA, descA := m.pushImage("registry.local:5000/team-a/app", "a")
	m.signLegacy(t, teamB, refA, descA.Digest, simplePayload(refA.Name(), descA.Digest))
	refusal(t, v.Verify(ctx, refA, descA, m), ErrUnknownKey, refA, descA.Digest, "trusted: team-a.pub")
	m.signLegacy(t, teamA, refA, descA.Digest, simplePayload(refA.Name(), descA.Digest))
	if vd := v.Check(ctx, refA, descA, m); vd.Err != nil || vd.Key != "team-a.pub" {
		t.Fatalf("team-a: %+v", vd)
	}

	refBB, descBB := m.pushImage("busybox", "bb")
	if vd := v.Check(ctx, refBB, descBB, m); vd.Err != nil || vd.Verified || !strings.Contains(vd.Unverified, "policy[1]") {
		t.Fatalf("busybox: %+v", vd)
	}

	refL, descL := m.pushImage("registry.local:5000/legacy/app", "l")
	refusal(t, v.Verify(ctx, refL, descL, m), ErrNoTrustedKey, refL, descL.Digest, "retired.pub")

	// No rule: any key of the directory.
	refO, descO := m.pushImage("registry.local:5000/other/app", "o")
	m.signBundle(t, teamB, refO, descO, statement(descO.Digest, PredicateTypeSign), bundleOpts{viaTag: true})
	if vd := v.Check(ctx, refO, descO, m); vd.Err != nil || vd.Key != "team-b.pub" {
		t.Fatalf("default: %+v", vd)
	}

	// No keys at all: verification is off.
	off := mustVerifier(t, Config{Dir: filepath.Join(t.TempDir(), "missing")}, nil)
	if off.Enabled() || off.Verify(ctx, refO, descO, m) != nil {
		t.Fatal("verification is on without keys")
	}
	if !v.Enabled() {
		t.Fatal("verification is off with keys")
	}
	// Rules that name keys switch it on even with an empty directory.
	named := mustVerifier(t, Config{Dir: t.TempDir(), Policy: []Rule{{Images: "*", Keys: []string{"k.pub"}}}}, nil)
	if !named.Enabled() || !errors.Is(named.Verify(ctx, refO, descO, m), ErrNoTrustedKey) {
		t.Fatal("a rule naming absent keys must refuse")
	}
}

func TestConfigValidate(t *testing.T) {
	err := Config{Policy: []Rule{
		{Images: "a.local/*", Keys: []string{"a.pub"}},
		{Images: "a//b", Keys: []string{"a.pub"}},
		{Images: "b.local/*"},
		{Images: "c.local/*", Keys: []string{"c.pub"}, Unverified: true},
		{Images: "d.local/*", Keys: []string{"../etc/passwd.pub", "d.key"}},
	}}.Validate()
	if !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"policy[1].images", "policy[2]: name the keys", "policy[3]: keys and unverified", "policy[4].keys[0]", "policy[4].keys[1]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "policy[0]") {
		t.Errorf("valid rule refused: %v", err)
	}
	if _, err := New(Config{Policy: []Rule{{Images: ""}}}, nil); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("New accepted an invalid policy: %v", err)
	}
}

func TestKeySetID(t *testing.T) {
	a, b := newKey(t, "a.pub", "p256"), newKey(t, "b.pub", "rsa")
	dir := trustDir(t, a)
	v := mustVerifier(t, Config{Dir: dir}, nil)
	id0 := v.KeySetID()
	if changed, err := v.Reload(); err != nil || changed || v.KeySetID() != id0 {
		t.Fatalf("reload without change: %v %v", changed, err)
	}
	if again := mustVerifier(t, Config{Dir: dir}, nil); again.KeySetID() != id0 {
		t.Fatal("the same keys give another ID")
	}
	os.WriteFile(filepath.Join(dir, b.name), b.pubPEM, 0o644)
	changed, err := v.Reload()
	id1 := v.KeySetID()
	if err != nil || !changed || id1 == id0 {
		t.Fatalf("key added: changed %v, %v", changed, err)
	}
	// The same file name with another key is another key set.
	c := newKey(t, "b.pub", "ed25519")
	os.WriteFile(filepath.Join(dir, c.name), c.pubPEM, 0o644)
	if changed, _ := v.Reload(); !changed || v.KeySetID() == id1 {
		t.Fatal("key replaced: ID unchanged")
	}
	os.Remove(filepath.Join(dir, c.name))
	if changed, _ := v.Reload(); !changed || v.KeySetID() != id0 {
		t.Fatal("key removed: ID is not the first one again")
	}
	// Files that are not keys: ignored, or reported and left out.
	os.WriteFile(filepath.Join(dir, "README"), []byte("hi"), 0o644)
	os.WriteFile(filepath.Join(dir, "broken.pub"), []byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"), 0o644)
	if changed, _ := v.Reload(); changed || len(v.KeySet().Errors) != 1 || !errors.Is(v.KeySet().Errors[0], ErrInvalidKey) {
		t.Fatalf("non-keys: changed %v, errors %v", changed, v.KeySet().Errors)
	}
	// The policy is part of the ID.
	p := mustVerifier(t, Config{Dir: dir, Policy: []Rule{{Images: "*", Unverified: true}}}, nil)
	if p.KeySetID() == id0 {
		t.Fatal("policy not in the ID")
	}
}

func TestWatchReloads(t *testing.T) {
	dir := t.TempDir()
	v := mustVerifier(t, Config{Dir: dir}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ids := make(chan string, 4)
	done := make(chan error, 1)
	go func() { done <- v.Watch(ctx, time.Hour, func(id string) { ids <- id }, nil) }()
	time.Sleep(100 * time.Millisecond) // let the watch start
	k := newKey(t, "new.pub", "p256")
	if err := os.WriteFile(filepath.Join(dir, k.name), k.pubPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-ids:
		if id != v.KeySetID() || len(v.KeySet().Keys) != 1 {
			t.Fatalf("onChange(%s), ID %s, keys %v", id, v.KeySetID(), v.KeySet().Names())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no reload after a key was added")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestCachedVerdictSurvivesTheRegistry(t *testing.T) {
	ctx := context.Background()
	k := newKey(t, "k.pub", "p256")
	dir := trustDir(t, k)
	cache, err := NewFileCache(filepath.Join(t.TempDir(), "state", "verdicts.json"))
	if err != nil {
		t.Fatal(err)
	}
	v := mustVerifier(t, Config{Dir: dir}, cache)
	m := newMemRegistry()
	ref, desc := m.pushImage(repo, "cached")
	m.signLegacy(t, k, ref, desc.Digest, simplePayload(repo, desc.Digest))
	if vd := v.Check(ctx, ref, desc, m); vd.Err != nil || vd.Cached {
		t.Fatalf("first: %+v", vd)
	}
	m.down.Store(true)
	before := m.requests.Load()
	// A new process (agent restart): the verdict is read back from disk.
	cache2, err := NewFileCache(cache.path)
	if err != nil {
		t.Fatal(err)
	}
	v2 := mustVerifier(t, Config{Dir: dir}, cache2)
	if vd := v2.Check(ctx, ref, desc, m); vd.Err != nil || !vd.Cached || vd.Key != "k.pub" || m.requests.Load() != before {
		t.Fatalf("registry gone: %+v (%d requests)", vd, m.requests.Load()-before)
	}
	// Another digest was never verified: unreachable.
	_, other := m.pushImage(repo, "never")
	refusal(t, v2.Verify(ctx, ref, other, m), ErrRegistryUnreachable, ref, other.Digest, "never verified")
	// The keys change: the verdict no longer applies.
	k2 := newKey(t, "k2.pub", "p256")
	os.WriteFile(filepath.Join(dir, k2.name), k2.pubPEM, 0o644)
	if changed, _ := v2.Reload(); !changed {
		t.Fatal("no change")
	}
	refusal(t, v2.Verify(ctx, ref, desc, m), ErrRegistryUnreachable, ref, desc.Digest, "never verified")
	m.down.Store(false)
	if vd := v2.Check(ctx, ref, desc, m); vd.Err != nil || vd.Cached {
		t.Fatalf("re-verified: %+v", vd)
	}
}

func TestFileCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), "verdicts.json")
	c, err := NewFileCache(path)
	if err != nil {
		t.Fatal(err)
	}
	d := digest.FromString("x")
	key := CacheKey("id", repo, d)
	if _, ok := c.Lookup(key); ok {
		t.Fatal("empty cache hit")
	}
	if err := c.Remember(key, "k.pub"); err != nil {
		t.Fatal(err)
	}
	again, _ := NewFileCache(path)
	if k, ok := again.Lookup(key); !ok || k != "k.pub" {
		t.Fatalf("after reopen: %q %v", k, ok)
	}
	if _, ok := again.Lookup(CacheKey("other-id", repo, d)); ok {
		t.Fatal("a verdict under another key set applies")
	}
	os.WriteFile(path, []byte("{not json"), 0o600)
	corrupt, err := NewFileCache(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := corrupt.Lookup(key); ok {
		t.Fatal("corrupt cache hit")
	}
	for i := 0; i < MaxFileCacheEntries+10; i++ {
		corrupt.m[CacheKey("id", repo, digest.FromString(string(rune(i))))] = fileEntry{Key: "k", At: time.Unix(int64(i), 0)}
	}
	if err := corrupt.Remember(key, "k.pub"); err != nil || len(corrupt.m) != MaxFileCacheEntries {
		t.Fatalf("bound: %d entries, %v", len(corrupt.m), err)
	}
	if _, ok := corrupt.Lookup(key); !ok {
		t.Fatal("the newest verdict was evicted")
	}
}
