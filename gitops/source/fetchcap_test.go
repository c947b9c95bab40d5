package source

import (
	"context"
	"crypto/rand"
	"errors"
	"path/filepath"
	"testing"
)

// A repository that serves more than MaxFetchBytes is cut off with
// ErrFetchTooLarge, and its commit is not used.
func TestFetchTooLarge(t *testing.T) {
	g := newRepo(t)
	noise := make([]byte, 2<<20) // random: it does not compress
	rand.Read(noise)
	if err := g.Write(map[string]string{"apps/a.yaml": "a: 1\n", "blob.bin": string(noise)}); err != nil {
		t.Fatal(err)
	}
	c := must[string](t)(g.Commit("big"))
	old := MaxFetchBytes
	MaxFetchBytes = 512 << 10
	defer func() { MaxFetchBytes = old }()

	ctx := context.Background()
	r := must[*Repo](t)(Open(filepath.Join(t.TempDir(), "src"), g.URL))
	for range 2 {
		// Also the second time: nothing of the first attempt stays to be
		// served as if it had been fetched.
		if _, err := r.Fetch(ctx, Ref{Branch: "main"}, c, nil); !errors.Is(err, ErrFetchTooLarge) {
			t.Fatalf("err = %v, want ErrFetchTooLarge", err)
		}
		if r.Has(c) {
			t.Fatal("the commit of a fetch that was too large is in the clone")
		}
	}

	MaxFetchBytes = old
	if _, err := r.Fetch(ctx, Ref{Branch: "main"}, c, nil); err != nil {
		t.Fatalf("within the limit: %v", err)
	}
}
