package apiserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

func names(objs []*cachedObject) []string {
	var out []string
	for _, co := range objs {
		out = append(out, objectCacheKey(co))
	}
	return out
}

// TestListAtRebuildsAnOldState: the state at a revision, rebuilt from the
// current objects and the recent events, is what a list then returned.
func TestListAtRebuildsAnOldState(t *testing.T) {
	c, st := newTestCache(t, 100, 10)
	for i := range 6 {
		putConfigMap(t, st, fmt.Sprintf("cm-%d", i))
	}
	if err := c.waitFor(context.Background(), c.revision()); err != nil {
		t.Fatal(err)
	}
	before, rev := c.list(cmRes, &filter{})
	// After rev: one deleted, one created, one changed (and deleted).
	kv, err := st.Get(context.Background(), objectKey(cmRes, "default", "cm-4"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Delete(context.Background(), objectKey(cmRes, "default", "cm-4"), kv.ModRevision); err != nil {
		t.Fatal(err)
	}
	last := putConfigMap(t, st, "cm-9")
	if err := c.waitFor(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	now, _ := c.list(cmRes, &filter{})
	if slices.Contains(names(now), "default/cm-4") || !slices.Contains(names(now), "default/cm-9") {
		t.Fatalf("the changes did not reach the cache: %v", names(now))
	}
	got, at, err := c.listAt(cmRes, &filter{}, rev, "default/cm-1")
	if err != nil || at != rev {
		t.Fatalf("listAt = rev %d, %v; want %d", at, err, rev)
	}
	if want := names(before)[2:]; !slices.Equal(names(got), want) {
		t.Errorf("state at %d after cm-1 = %v, want %v", rev, names(got), want)
	}
	for i, co := range got {
		if co != before[i+2] {
			t.Errorf("%s is not the object the first page saw", objectCacheKey(co))
		}
	}
	// rv 0: the current state.
	cur, at, err := c.listAt(cmRes, &filter{}, 0, "")
	if err != nil || at != c.revision() || !slices.Equal(names(cur), names(now)) {
		t.Errorf("listAt(0) = %v at %d (%v), want %v", names(cur), at, err, names(now))
	}
}

func TestListAtTooOld(t *testing.T) {
	c, st := newTestCache(t, 3, 10)
	first := putConfigMap(t, st, "a")
	var last int64
	for i := range 5 {
		last = putConfigMap(t, st, fmt.Sprintf("b%d", i))
	}
	if err := c.waitFor(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.listAt(cmRes, &filter{}, first, ""); err != errTooOld {
		t.Errorf("a revision outside the window: err = %v, want errTooOld", err)
	}
	s := &Server{cache: c}
	_, _, err := s.continueList(cmRes, &filter{}, continueToken{V: continueVersion, RV: first, Start: "default/b1"})
	var se *apierrors.StatusError
	if !errors.As(err, &se) || !apierrors.IsResourceExpired(err) {
		t.Fatalf("continuing a list too old: err = %v, want 410 Gone", err)
	}
	tok, err := decodeContinue(se.ErrStatus.ListMeta.Continue)
	if err != nil || tok.RV != 0 || tok.Start != "default/b1" {
		t.Errorf("the 410's token = %+v (%v), want the rest from default/b1 at the current state", tok, err)
	}
}
