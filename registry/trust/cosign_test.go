package trust_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"flotilla.dev/flotilla/registry"
	"flotilla.dev/flotilla/registry/trust"
	"flotilla.dev/flotilla/registry/trust/trusttest"
	"flotilla.dev/flotilla/test/testimage"
)

// world is a private docker-registry, the cosign CLI with keys, and a
// trust directory holding some of them.
type world struct {
	reg      *testimage.Registry
	cli      *trusttest.CLI
	trustDir string
}

func newWorld(t testing.TB) *world {
	t.Helper()
	trusttest.Require(t, testimage.RegistryBinary, "apt-get install docker-registry, or scripts/install-deps.sh")
	w := &world{cli: trusttest.Cosign(t), reg: testimage.StartRegistry(t), trustDir: filepath.Join(t.TempDir(), "trust")}
	trusttest.InstallKey(t, w.cli.GenerateKeyPair(t, "release"), w.trustDir, "release.pub")
	w.cli.GenerateKeyPair(t, "stranger") // never trusted
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	trusttest.InstallKey(t, w.cli.ImportKey(t, "ed", edKey), w.trustDir, "ed.pub")
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	trusttest.InstallKey(t, w.cli.ImportKey(t, "rsa", rsaKey), w.trustDir, "rsa.pub")
	return w
}

// image builds a distinct test image in repository name.
func (w *world) image(t testing.TB, name, variant string) testimage.Image {
	t.Helper()
	img, err := testimage.BuildImage(w.reg, name, testimage.AppPackage, testimage.Options{Env: []string{"VARIANT=" + variant}})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func resolve(t testing.TB, resolver interface {
	Resolve(context.Context, string) (string, ocispec.Descriptor, error)
}, image string) (registry.Reference, ocispec.Descriptor) {
	t.Helper()
	ref, err := registry.ParseReference(image)
	if err != nil {
		t.Fatal(err)
	}
	_, desc, err := resolver.Resolve(context.Background(), ref.PullName())
	if err != nil {
		t.Fatal(err)
	}
	return ref, desc
}

// copyManifest copies the manifest under tag from to tag to, as a
// registry user with push rights could.
func copyManifest(t *testing.T, reg *testimage.Registry, repo, from, to string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, reg.URL()+"/v2/"+repo+"/manifests/"+from, nil)
	req.Header.Set("Accept", ocispec.MediaTypeImageManifest)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", from, resp.Status)
	}
	req, _ = http.NewRequest(http.MethodPut, reg.URL()+"/v2/"+repo+"/manifests/"+to, bytes.NewReader(body))
	req.Header.Set("Content-Type", ocispec.MediaTypeImageManifest)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT %s: %s", to, resp.Status)
	}
}

func sigTag(digest string) string { return strings.Replace(digest, ":", "-", 1) + ".sig" }

func TestCosignSignedImages(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	resolver := registry.Config{}.Resolver()
	v, err := trust.New(trust.Config{Dir: w.trustDir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(v.KeySet().Names(), " "); got != "ed.pub release.pub rsa.pub" || len(v.KeySet().Errors) > 0 {
		t.Fatalf("keys %s, errors %v", got, v.KeySet().Errors)
	}

	accepted := []struct {
		key    string
		layout trusttest.Layout
		want   string
	}{
		{"release", trusttest.Legacy, trust.LayoutSigTag},
		{"release", trusttest.Bundle, trust.LayoutBundle},
		{"ed", trusttest.Legacy, trust.LayoutSigTag},
		{"ed", trusttest.Bundle, trust.LayoutBundle},
		{"rsa", trusttest.Legacy, trust.LayoutSigTag},
		{"rsa", trusttest.Bundle, trust.LayoutBundle},
	}
	for _, c := range accepted {
		img := w.image(t, "signed", c.key+c.want)
		w.cli.Sign(t, c.key, img.Ref, c.layout)
		ref, desc := resolve(t, resolver, img.Ref)
		if vd := v.Check(ctx, ref, desc, resolver); vd.Err != nil || !vd.Verified || vd.Key != c.key+".pub" || vd.Layout != c.want {
			t.Errorf("signed by %s in %s: %+v", c.key, c.want, vd)
		}
	}

	t.Run("unsigned", func(t *testing.T) {
		img := w.image(t, "unsigned", "1")
		ref, desc := resolve(t, resolver, img.Ref)
		err := v.Verify(ctx, ref, desc, resolver)
		if !errors.Is(err, trust.ErrImageSignature) || !errors.Is(err, trust.ErrNoSignature) || !strings.Contains(err.Error(), img.Digest) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("signed by another key", func(t *testing.T) {
		img := w.image(t, "stranger", "1")
		w.cli.Sign(t, "stranger", img.Ref, trusttest.Legacy)
		w.cli.Sign(t, "stranger", img.Ref, trusttest.Bundle)
		ref, desc := resolve(t, resolver, img.Ref)
		err := v.Verify(ctx, ref, desc, resolver)
		if !errors.Is(err, trust.ErrUnknownKey) || !strings.Contains(err.Error(), "2 signature(s) found") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("signature copied from another digest", func(t *testing.T) {
		signed, victim := w.image(t, "copy", "signed"), w.image(t, "copy", "victim")
		w.cli.Sign(t, "release", signed.Ref, trusttest.Legacy)
		copyManifest(t, w.reg, "copy", sigTag(signed.Digest), sigTag(victim.Digest))
		ref, desc := resolve(t, resolver, victim.Ref)
		err := v.Verify(ctx, ref, desc, resolver)
		if !errors.Is(err, trust.ErrDigestMismatch) || !strings.Contains(err.Error(), signed.Digest) || !strings.Contains(err.Error(), victim.Digest) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("registry gone after a verification", func(t *testing.T) {
		proxy := trusttest.NewProxy(t, w.reg.Host)
		img := w.image(t, "gone", "1")
		w.cli.Sign(t, "release", img.Ref, trusttest.Bundle)
		viaProxy := proxy.Host + strings.TrimPrefix(img.Ref, w.reg.Host)
		cache, err := trust.NewFileCache(filepath.Join(t.TempDir(), "verdicts.json"))
		if err != nil {
			t.Fatal(err)
		}
		cv, _ := trust.New(trust.Config{Dir: w.trustDir}, cache)
		ref, desc := resolve(t, resolver, viaProxy)
		if vd := cv.Check(ctx, ref, desc, resolver); vd.Err != nil || vd.Cached {
			t.Fatalf("first: %+v", vd)
		}
		proxy.Close()
		if vd := cv.Check(ctx, ref, desc, resolver); vd.Err != nil || !vd.Cached {
			t.Fatalf("cached: %+v", vd)
		}
		// Without the verdict, the same image is refused as unreachable.
		if err := v.Verify(ctx, ref, desc, resolver); !errors.Is(err, trust.ErrRegistryUnreachable) {
			t.Fatalf("uncached: %v", err)
		}
		// Trusted keys change: the verdict no longer applies.
		before := cv.KeySetID()
		if err := os.Remove(filepath.Join(w.trustDir, "rsa.pub")); err != nil {
			t.Fatal(err)
		}
		if changed, err := cv.Reload(); err != nil || !changed || cv.KeySetID() == before {
			t.Fatalf("reload: changed %v, %v", changed, err)
		}
		if err := cv.Verify(ctx, ref, desc, resolver); !errors.Is(err, trust.ErrRegistryUnreachable) {
			t.Fatalf("after the keys changed: %v", err)
		}
	})
}

// TestPullerRefusesBeforeUnpacking: with the verifier in the puller, a
// refused image leaves nothing in containerd, a signed one is pulled, and
// both resolve, and their signatures are found, through a mirror list
// whose first mirror is down and whose second lacks the image.
func TestPullerRefusesBeforeUnpacking(t *testing.T) {
	w := newWorld(t)
	client, ns := testimage.Containerd(t)
	ctx := context.Background()
	nctx := namespaces.WithNamespace(ctx, ns)
	v, err := trust.New(trust.Config{Dir: w.trustDir}, trust.NewMemoryCache())
	if err != nil {
		t.Fatal(err)
	}
	// Images are named after an upstream that cannot be reached; the
	// first mirror is down, the second a registry without the images (or
	// their signatures), the third the test registry that has them.
	const upstream = "upstream.invalid"
	empty := testimage.StartRegistry(t)
	regs := registry.Config{Hosts: map[string]registry.HostConfig{
		upstream: {Mirrors: []string{"http://" + trusttest.DeadHost(t), "http://" + empty.Host, "http://" + w.reg.Host}},
	}}
	p, err := registry.NewPuller(client, registry.PullerConfig{Namespace: ns, Registries: regs, Verifier: v})
	if err != nil {
		t.Fatal(err)
	}
	viaMirror := func(img testimage.Image) string { return upstream + strings.TrimPrefix(img.Ref, w.reg.Host) }

	unsigned := w.image(t, "pulled", "unsigned")
	_, err = p.Pull(ctx, viaMirror(unsigned))
	if !errors.Is(err, registry.ErrUntrusted) || !errors.Is(err, trust.ErrImageSignature) || !errors.Is(err, trust.ErrNoSignature) {
		t.Fatalf("unsigned pull: %v", err)
	}
	imgs, err := client.ImageService().List(nctx)
	if err != nil || len(imgs) != 0 {
		t.Fatalf("image records after a refusal: %v %v", imgs, err)
	}
	var snaps []string
	if err := client.SnapshotService(registry.DefaultSnapshotter).Walk(nctx, func(_ context.Context, i snapshots.Info) error {
		snaps = append(snaps, i.Name)
		return nil
	}); err != nil || len(snaps) != 0 {
		t.Fatalf("snapshots after a refusal: %v %v", snaps, err)
	}
	var blobs []string
	if err := client.ContentStore().Walk(nctx, func(i content.Info) error {
		blobs = append(blobs, i.Digest.String())
		return nil
	}); err != nil || len(blobs) != 0 {
		t.Fatalf("content after a refusal (resolving stores nothing): %v %v", blobs, err)
	}
	if _, err := client.GetImage(nctx, upstream+"/pulled@"+unsigned.Digest); !errdefs.IsNotFound(err) {
		t.Fatalf("refused image is in containerd: %v", err)
	}

	for _, layout := range []trusttest.Layout{trusttest.Legacy, trusttest.Bundle} {
		signed := w.image(t, "pulled", fmt.Sprint("signed", layout))
		w.cli.Sign(t, "release", signed.Ref, layout)
		got, err := p.Pull(ctx, viaMirror(signed))
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := got.Image.IsUnpacked(nctx, registry.DefaultSnapshotter); err != nil || !ok || got.Digest.String() != signed.Digest {
			t.Fatalf("signed pull: %+v unpacked %v %v", got, ok, err)
		}
	}
}

// TestPresentImageReverified: an image pulled and verified starts again
// with its registry gone (the cached verdict), and is checked again when
// the trusted keys change, which it then fails offline.
func TestPresentImageReverified(t *testing.T) {
	w := newWorld(t)
	client, ns := testimage.Containerd(t)
	ctx := context.Background()
	proxy := trusttest.NewProxy(t, w.reg.Host)
	img := w.image(t, "restart", "1")
	w.cli.Sign(t, "release", img.Ref, trusttest.Bundle)
	cache, err := trust.NewFileCache(filepath.Join(t.TempDir(), "verdicts.json"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := trust.New(trust.Config{Dir: w.trustDir}, cache)
	if err != nil {
		t.Fatal(err)
	}
	p, err := registry.NewPuller(client, registry.PullerConfig{Namespace: ns, Verifier: v})
	if err != nil {
		t.Fatal(err)
	}
	image := proxy.Host + strings.TrimPrefix(img.Ref, w.reg.Host)
	if _, err := p.Pull(ctx, image); err != nil {
		t.Fatal(err)
	}
	proxy.Close()

	ref, _ := registry.ParseReference(image)
	present, ok, err := p.Present(ctx, ref)
	if err != nil || !ok {
		t.Fatalf("present: %v %v", ok, err)
	}
	if err := p.Reverify(ctx, present); err != nil {
		t.Fatalf("registry gone, verdict cached: %v", err)
	}
	if err := os.Remove(filepath.Join(w.trustDir, "ed.pub")); err != nil {
		t.Fatal(err)
	}
	if changed, err := v.Reload(); err != nil || !changed {
		t.Fatalf("reload: %v %v", changed, err)
	}
	err = p.Reverify(ctx, present)
	if !errors.Is(err, registry.ErrUntrusted) || !errors.Is(err, trust.ErrRegistryUnreachable) || !strings.Contains(err.Error(), img.Digest) {
		t.Fatalf("keys changed, registry gone: %v", err)
	}
}
