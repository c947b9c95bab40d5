package trust_test

import (
	"context"
	"testing"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"flotilla.dev/flotilla/registry"
	"flotilla.dev/flotilla/registry/trust"
	"flotilla.dev/flotilla/registry/trust/trusttest"
	"flotilla.dev/flotilla/test/testimage"
)

// The figures of image trust, on a loopback docker-registry:
//
//	go test -run '^$' -bench . -benchtime 20x ./registry/trust
//
// BenchmarkVerify/cold fetches the signatures and checks them (no cached
// verdict); /warm answers from the verdict cache. BenchmarkPull pulls and
// unpacks the same image into containerd with and without verification,
// from an empty namespace each time.

func benchImage(b *testing.B, layout trusttest.Layout) (*world, string) {
	b.Helper()
	w := newWorld(b)
	img := w.image(b, "bench", "1")
	w.cli.Sign(b, "release", img.Ref, layout)
	return w, img.Ref
}

func BenchmarkVerify(b *testing.B) {
	for _, c := range []struct {
		name   string
		layout trusttest.Layout
	}{{"sigtag", trusttest.Legacy}, {"bundle", trusttest.Bundle}} {
		w, ref := benchImage(b, c.layout)
		resolver := registry.Config{}.Resolver()
		r, desc := resolve(b, resolver, ref)
		ctx := context.Background()
		b.Run(c.name+"/cold", func(b *testing.B) {
			v, err := trust.New(trust.Config{Dir: w.trustDir}, nil)
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < b.N; i++ {
				if err := v.Verify(ctx, r, desc, resolver); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/warm", func(b *testing.B) {
			v, err := trust.New(trust.Config{Dir: w.trustDir}, trust.NewMemoryCache())
			if err != nil {
				b.Fatal(err)
			}
			if err := v.Verify(ctx, r, desc, resolver); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := v.Verify(ctx, r, desc, resolver); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPull(b *testing.B) {
	w, ref := benchImage(b, trusttest.Bundle)
	client, ns := testimage.Containerd(b)
	v, err := trust.New(trust.Config{Dir: w.trustDir}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		verifier registry.Verifier
	}{{"alone", nil}, {"verified", v}} {
		b.Run(c.name, func(b *testing.B) {
			p, err := registry.NewPuller(client, registry.PullerConfig{Namespace: ns, Verifier: c.verifier})
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				empty(b, client, ns)
				b.StartTimer()
				got, err := p.Pull(context.Background(), ref)
				if err != nil || !got.Fetched {
					b.Fatalf("pull: %+v %v", got, err)
				}
			}
			b.StopTimer()
			empty(b, client, ns)
		})
	}
}

// empty removes everything from the namespace, so that each pull fetches
// and unpacks the whole image.
func empty(b *testing.B, client *containerd.Client, ns string) {
	b.Helper()
	if err := testimage.DeleteNamespace(context.Background(), client, ns); err != nil {
		b.Fatal(err)
	}
	ctx := namespaces.WithNamespace(context.Background(), ns)
	if err := client.NamespaceService().Create(ctx, ns, map[string]string{"flotilla.dev/test": "true"}); err != nil {
		b.Fatal(err)
	}
}
