package registry

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"flotilla.dev/flotilla/test/testimage"
)

// blobTap sits in front of a registry: it counts the bytes of blob bodies
// it passes on, records Range headers, and can stop serving a blob after
// some bytes, as a link that goes down mid-pull (containerd retries a
// dropped body from where it stopped, so one cut connection is not enough).
type blobTap struct {
	mu     sync.Mutex
	cutAt  int64 // serve no more than this many bytes of any blob; 0: no limit
	served map[string]int64
	ranges map[string][]string
}

func (b *blobTap) handler(upstream *url.URL) http.Handler {
	rp := httputil.NewSingleHostReverseProxy(upstream)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/blobs/") {
			rp.ServeHTTP(w, r)
			return
		}
		b.mu.Lock()
		b.ranges[r.URL.Path] = append(b.ranges[r.URL.Path], r.Header.Get("Range"))
		tw := &tapWriter{ResponseWriter: w, tap: b, path: r.URL.Path, limited: b.cutAt > 0, left: b.cutAt - b.served[r.URL.Path]}
		b.mu.Unlock()
		rp.ServeHTTP(tw, r)
	})
}

type tapWriter struct {
	http.ResponseWriter
	tap     *blobTap
	path    string
	limited bool
	left    int64
}

func (t *tapWriter) Write(p []byte) (int, error) {
	if t.limited && int64(len(p)) > t.left {
		n, _ := t.ResponseWriter.Write(p[:max(t.left, 0)])
		t.count(int64(n))
		// Abort the response mid-body, as a dropped link would.
		panic(http.ErrAbortHandler)
	}
	n, err := t.ResponseWriter.Write(p)
	t.count(int64(n))
	return n, err
}

func (t *tapWriter) count(n int64) {
	t.left -= n
	t.tap.mu.Lock()
	t.tap.served[t.path] += n
	t.tap.mu.Unlock()
}

// An interrupted pull resumes from the bytes already on the device: the
// second attempt asks the registry for the rest of the layer only.
func TestInterruptedPullResumes(t *testing.T) {
	client, ns := testimage.Containerd(t)
	reg := testimage.SharedRegistry(t)
	noise := make([]byte, 8<<20) // random, so the gzip layer stays large
	rand.Read(noise)
	img, err := testimage.BuildImage(reg, "resume", testimage.AppPackage, testimage.Options{Files: map[string]string{"/noise": string(noise)}})
	if err != nil {
		t.Fatal(err)
	}
	up, _ := url.Parse(reg.URL())
	const cut = 3 << 20
	tap := &blobTap{cutAt: cut, served: map[string]int64{}, ranges: map[string][]string{}}
	srv := httptest.NewServer(tap.handler(up))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + strings.TrimPrefix(img.Ref, reg.Host)

	p, err := NewPuller(client, PullerConfig{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.Pull(ctx, ref); err == nil {
		t.Fatal("the pull succeeded through a link that drops every large blob")
	}
	tap.mu.Lock()
	var layer string
	for path, n := range tap.served {
		if n == cut {
			layer = path
		}
	}
	tap.cutAt = 0
	first := tap.served[layer]
	tap.mu.Unlock()
	if layer == "" {
		t.Fatalf("no blob was cut at %d bytes: %v", cut, tap.served)
	}

	// containerd collects garbage between the attempts (as it does after
	// any deletion, sooner or later): what the pull fetched must survive.
	nctx := namespaces.WithNamespace(ctx, ns)
	ls := client.LeasesService()
	gc, err := ls.Create(nctx, leases.WithRandomID())
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Delete(nctx, gc, leases.SynchronousDelete); err != nil {
		t.Fatal(err)
	}

	got, err := p.Pull(ctx, ref)
	if err != nil {
		t.Fatalf("second pull: %v", err)
	}
	tap.mu.Lock()
	defer tap.mu.Unlock()
	again := tap.served[layer] - first
	head, err := http.Head(reg.URL() + layer)
	if err != nil {
		t.Fatal(err)
	}
	head.Body.Close()
	size := head.ContentLength
	rs := tap.ranges[layer]
	last := rs[len(rs)-1]
	// The registry wrote cut bytes before the link dropped, but the last of
	// them may still have been in flight: the device resumes from what it
	// actually holds, which is some offset after the start and at most cut.
	var from int64
	if _, err := fmt.Sscanf(last, "bytes=%d-", &from); err != nil || from <= 0 || from > cut {
		t.Fatalf("Range headers of the layer: %q, want the second pull's to resume within the first %d bytes already fetched", rs, cut)
	}
	if again != size-from || !got.Fetched {
		t.Fatalf("the second pull fetched %d bytes of the %d-byte layer (resumed at %d); want the %d left", again, size, from, size-from)
	}
	t.Logf("layer %s: %d bytes before the cut, %d after (Range %s)", layer, first, again, last)

	// Once pulled, the lease that kept the partial layer is gone.
	leases, err := ls.List(nctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		if strings.HasPrefix(l.ID, "flotilla-pull-") {
			t.Errorf("lease %s left after a successful pull", l.ID)
		}
	}
}
