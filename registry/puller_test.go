package registry

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"flotilla.dev/flotilla/test/testimage"
)

type countingVerifier struct {
	calls  atomic.Int32
	refuse error
}

func (v *countingVerifier) Verify(ctx context.Context, ref Reference, target ocispec.Descriptor, _ remotes.Resolver) error {
	v.calls.Add(1)
	if target.Digest == "" || target.MediaType == "" {
		return errors.New("verifier got an empty descriptor")
	}
	return v.refuse
}

func TestPullerIntegration(t *testing.T) {
	client, ns := testimage.Containerd(t)
	ref := testimage.App(t)
	ctx := context.Background()
	v := &countingVerifier{}
	p, err := NewPuller(client, PullerConfig{Namespace: ns, Verifier: v})
	if err != nil {
		t.Fatal(err)
	}

	first, err := p.Pull(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	parsed, _ := ParseReference(ref)
	if !first.Fetched || first.Digest != parsed.Digest || v.calls.Load() != 1 || first.Size == 0 {
		t.Fatalf("first pull = %+v, verifier calls %d", first, v.calls.Load())
	}
	nctx := namespaces.WithNamespace(ctx, ns)
	if ok, err := first.Image.IsUnpacked(nctx, DefaultSnapshotter); err != nil || !ok {
		t.Fatalf("unpacked = %v, %v", ok, err)
	}

	second, err := p.Pull(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if second.Fetched || second.Digest != first.Digest || v.calls.Load() != 1 {
		t.Fatalf("second pull = %+v, verifier calls %d; want it skipped", second, v.calls.Load())
	}

	t.Run("refused image is never stored", func(t *testing.T) {
		img, err := testimage.BuildImage(testimage.SharedRegistry(t), "refused", testimage.AppPackage, testimage.Options{Env: []string{"X=refused"}})
		if err != nil {
			t.Fatal(err)
		}
		rv := &countingVerifier{refuse: errors.New("no signature")}
		rp, _ := NewPuller(client, PullerConfig{Namespace: ns, Verifier: rv})
		if _, err := rp.Pull(ctx, img.Ref); !errors.Is(err, ErrUntrusted) {
			t.Fatalf("err = %v, want ErrUntrusted", err)
		}
		r, _ := ParseReference(img.Ref)
		if _, err := client.GetImage(nctx, r.PullName()); !errdefs.IsNotFound(err) {
			t.Fatalf("refused image is in containerd: %v", err)
		}
	})

	t.Run("tags need the policy's consent", func(t *testing.T) {
		img, err := testimage.BuildImage(testimage.SharedRegistry(t), "tagged", testimage.AppPackage, testimage.Options{Tag: "v7"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Pull(ctx, img.Tagged); !errors.Is(err, ErrNotPinned) {
			t.Fatalf("err = %v, want ErrNotPinned", err)
		}
		tp, _ := NewPuller(client, PullerConfig{Namespace: ns, Policy: Policy{AllowTags: true}})
		got, err := tp.Pull(ctx, img.Tagged)
		if err != nil {
			t.Fatal(err)
		}
		if got.Digest.String() != img.Digest || got.Image.Name() != img.Tagged {
			t.Fatalf("tag pull = %s %s, want %s %s", got.Image.Name(), got.Digest, img.Tagged, img.Digest)
		}
	})

	t.Run("missing image", func(t *testing.T) {
		missing := testimage.SharedRegistry(t).Host + "/nothing@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		if _, err := p.Pull(ctx, missing); !errors.Is(err, ErrImageNotFound) {
			t.Fatalf("err = %v, want ErrImageNotFound", err)
		}
	})
}
