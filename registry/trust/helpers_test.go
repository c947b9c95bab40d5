package trust

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/options"

	"flotilla.dev/flotilla/registry"
)

// memRegistry is an in-memory registry behind the remotes.Resolver
// interface, for hand-built signature layouts. With referrersAPI false its
// fetcher answers the referrers API with "not found", as registries before
// OCI 1.1 do.
type memRegistry struct {
	mu           sync.Mutex
	tags         map[string]ocispec.Descriptor // "repo:tag"
	blobs        map[digest.Digest][]byte
	media        map[digest.Digest]string
	referrers    map[digest.Digest][]ocispec.Descriptor
	referrersAPI bool
	down         atomic.Bool
	requests     atomic.Int32
}

func newMemRegistry() *memRegistry {
	return &memRegistry{tags: map[string]ocispec.Descriptor{}, blobs: map[digest.Digest][]byte{}, media: map[digest.Digest]string{}, referrers: map[digest.Digest][]ocispec.Descriptor{}}
}

var errDown = errors.New("dial tcp 127.0.0.1:5000: connect: connection refused")

func (m *memRegistry) put(mediaType string, b []byte) ocispec.Descriptor {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := digest.FromBytes(b)
	m.blobs[d], m.media[d] = b, mediaType
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
}

func (m *memRegistry) putJSON(mediaType string, v any) ocispec.Descriptor {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return m.put(mediaType, b)
}

func (m *memRegistry) tag(repo, tag string, d ocispec.Descriptor) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tags[repo+":"+tag] = d
}

func (m *memRegistry) Resolve(ctx context.Context, ref string) (string, ocispec.Descriptor, error) {
	m.requests.Add(1)
	if m.down.Load() {
		return "", ocispec.Descriptor{}, errDown
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, d, ok := strings.Cut(ref, "@"); ok {
		dg := digest.Digest(d)
		if b, ok := m.blobs[dg]; ok {
			return ref, ocispec.Descriptor{MediaType: m.media[dg], Digest: dg, Size: int64(len(b))}, nil
		}
		return "", ocispec.Descriptor{}, fmt.Errorf("%s: %w", ref, errdefs.ErrNotFound)
	}
	if d, ok := m.tags[ref]; ok {
		return ref, d, nil
	}
	return "", ocispec.Descriptor{}, fmt.Errorf("%s: %w", ref, errdefs.ErrNotFound)
}

func (m *memRegistry) Fetcher(ctx context.Context, ref string) (remotes.Fetcher, error) {
	return memFetcher{m}, nil
}

func (m *memRegistry) Pusher(ctx context.Context, ref string) (remotes.Pusher, error) {
	return nil, errors.New("read-only")
}

type memFetcher struct{ m *memRegistry }

func (f memFetcher) Fetch(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
	f.m.requests.Add(1)
	if f.m.down.Load() {
		return nil, errDown
	}
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	b, ok := f.m.blobs[desc.Digest]
	if !ok {
		return nil, fmt.Errorf("%s: %w", desc.Digest, errdefs.ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (f memFetcher) FetchReferrers(ctx context.Context, d digest.Digest, _ ...remotes.FetchReferrersOpt) ([]ocispec.Descriptor, error) {
	f.m.requests.Add(1)
	if f.m.down.Load() {
		return nil, errDown
	}
	if !f.m.referrersAPI {
		return []ocispec.Descriptor{}, nil
	}
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return append([]ocispec.Descriptor(nil), f.m.referrers[d]...), nil
}

// pushImage stores a small manifest in repo and returns its reference and
// descriptor.
func (m *memRegistry) pushImage(repo, salt string) (registry.Reference, ocispec.Descriptor) {
	cfg := m.put(ocispec.MediaTypeImageConfig, []byte(`{"salt":"`+salt+`"}`))
	man := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, Config: cfg, Layers: []ocispec.Descriptor{}}
	man.SchemaVersion = 2
	desc := m.putJSON(ocispec.MediaTypeImageManifest, man)
	ref, err := registry.ParseReference(repo + "@" + desc.Digest.String())
	if err != nil {
		panic(err)
	}
	return ref, desc
}

// testKey is a private key with its public PEM as cosign writes it.
type testKey struct {
	name   string
	priv   crypto.Signer
	pubPEM []byte
	signer signature.Signer
}

func newKey(t testing.TB, name, alg string) *testKey {
	t.Helper()
	var priv crypto.Signer
	var err error
	opts := []signature.LoadOption{options.WithHash(crypto.SHA256)}
	switch alg {
	case "p256":
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "p384":
		priv, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		opts = []signature.LoadOption{options.WithHash(crypto.SHA384)}
	case "ed25519":
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	case "rsa":
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	default:
		t.Fatalf("unknown algorithm %s", alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	pub, err := cryptoutils.MarshalPublicKeyToPEM(priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	s, err := signature.LoadSignerWithOpts(priv, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return &testKey{name: name, priv: priv, pubPEM: pub, signer: s}
}

func (k *testKey) sign(t testing.TB, msg []byte) []byte {
	t.Helper()
	sig, err := k.signer.SignMessage(bytes.NewReader(msg))
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

func (k *testKey) hint(t testing.TB) string {
	der, err := cryptoutils.MarshalPublicKeyToDER(k.priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// trustDir writes keys into a new trust directory.
func trustDir(t testing.TB, keys ...*testKey) string {
	t.Helper()
	dir := t.TempDir()
	for _, k := range keys {
		if err := os.WriteFile(filepath.Join(dir, k.name), k.pubPEM, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func simplePayload(repo string, d digest.Digest) []byte {
	return []byte(`{"critical":{"identity":{"docker-reference":"` + repo + `"},"image":{"docker-manifest-digest":"` + d.String() + `"},"type":"cosign container image signature"},"optional":null}`)
}

// signLegacy writes a cosign v2 signature of payload under the sig tag of
// target (appending a layer when one exists, as cosign does).
func (m *memRegistry) signLegacy(t testing.TB, k *testKey, ref registry.Reference, target digest.Digest, payload []byte) {
	t.Helper()
	layer := m.put(MediaTypeSimpleSigning, payload)
	layer.Annotations = map[string]string{AnnotationSignature: base64.StdEncoding.EncodeToString(k.sign(t, payload))}
	tag := tagFor(target, ".sig")
	var man ocispec.Manifest
	if d, ok := m.tags[ref.Name()+":"+tag]; ok {
		json.Unmarshal(m.blobs[d.Digest], &man)
	} else {
		man = ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, Config: m.put(ocispec.MediaTypeImageConfig, []byte(`{}`))}
		man.SchemaVersion = 2
	}
	man.Layers = append(man.Layers, layer)
	m.tag(ref.Name(), tag, m.putJSON(ocispec.MediaTypeImageManifest, man))
}

func statement(d digest.Digest, predicateType string) []byte {
	return []byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[{"digest":{"` + d.Algorithm().String() + `":"` + d.Encoded() + `"}}],"predicateType":"` + predicateType + `"}`)
}

type bundleOpts struct {
	keyless     bool
	payloadType string
	viaTag      bool // the fallback tag instead of the referrers API
}

// signBundle attaches a sigstore bundle over stmt as a referrer of target.
func (m *memRegistry) signBundle(t testing.TB, k *testKey, ref registry.Reference, target ocispec.Descriptor, stmt []byte, o bundleOpts) {
	t.Helper()
	pt := o.payloadType
	if pt == "" {
		pt = PayloadTypeInToto
	}
	sig := k.sign(t, PAE(pt, stmt))
	vm := map[string]any{"publicKey": map[string]string{"hint": k.hint(t)}}
	if o.keyless {
		vm = map[string]any{"certificate": map[string]string{"rawBytes": "MIIB"}}
	}
	b := map[string]any{
		"mediaType":            MediaTypeBundle,
		"verificationMaterial": vm,
		"dsseEnvelope": map[string]any{
			"payload":     base64.StdEncoding.EncodeToString(stmt),
			"payloadType": pt,
			"signatures":  []map[string]string{{"sig": base64.StdEncoding.EncodeToString(sig)}},
		},
	}
	layer := m.putJSON(MediaTypeBundle, b)
	subject := target
	man := ocispec.Manifest{
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: MediaTypeBundle,
		Config:       m.put(ocispec.MediaTypeEmptyJSON, []byte(`{}`)),
		Layers:       []ocispec.Descriptor{layer},
		Subject:      &subject,
	}
	man.SchemaVersion = 2
	desc := m.putJSON(ocispec.MediaTypeImageManifest, man)
	if o.viaTag {
		// As cosign's fallback index has it: the empty config's type.
		desc.ArtifactType = ocispec.MediaTypeEmptyJSON
		tag := tagFor(target.Digest, "")
		idx := ocispec.Index{MediaType: ocispec.MediaTypeImageIndex}
		if d, ok := m.tags[ref.Name()+":"+tag]; ok {
			json.Unmarshal(m.blobs[d.Digest], &idx)
		}
		idx.SchemaVersion = 2
		idx.Manifests = append(idx.Manifests, desc)
		m.tag(ref.Name(), tag, m.putJSON(ocispec.MediaTypeImageIndex, idx))
		return
	}
	desc.ArtifactType = MediaTypeBundle
	m.mu.Lock()
	m.referrers[target.Digest] = append(m.referrers[target.Digest], desc)
	m.mu.Unlock()
}

func mustVerifier(t testing.TB, cfg Config, cache Cache) *Verifier {
	t.Helper()
	v, err := New(cfg, cache)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
