package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"flotilla.dev/flotilla/hub/store"
)

// Option adjusts the suite to what an implementation offers.
type Option func(*config)

type config struct {
	reopen          func(t *testing.T, old store.Store) store.Store
	slowWriteCount  int
	livenessTimeout time.Duration
}

// WithReopen enables the durability tests: reopen closes old (which may
// already be closed) and returns a store over the same data.
func WithReopen(reopen func(t *testing.T, old store.Store) store.Store) Option {
	return func(c *config) { c.reopen = reopen }
}

// WithSlowWatcherWrites sets how many writes the slow-watcher test makes
// while a watcher reads nothing (default 1000). The store under test must
// end such a watcher well before that many events, so configure its watch
// buffer small.
func WithSlowWatcherWrites(n int) Option {
	return func(c *config) { c.slowWriteCount = n }
}

// livenessTimeout bounds every wait for an event, so that a missing event
// fails the test with a message instead of hanging it. It is not a
// performance assertion.
const defaultLivenessTimeout = 30 * time.Second

// Run runs the contract suite. newStore returns an empty store that the
// suite owns (it closes it); register cleanup of its files with t.Cleanup.
func Run(t *testing.T, newStore func(t *testing.T) store.Store, opts ...Option) {
	c := config{slowWriteCount: 1000, livenessTimeout: defaultLivenessTimeout}
	for _, o := range opts {
		o(&c)
	}
	s := &suite{cfg: c, newStore: newStore}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"CreateGet", s.testCreateGet},
		{"UpdateCAS", s.testUpdateCAS},
		{"UpdateUnconditional", s.testUpdateUnconditional},
		{"DeletePrecondition", s.testDeletePrecondition},
		{"EmptyValue", s.testEmptyValue},
		{"CallerMayReuseValue", s.testCallerMayReuseValue},
		{"ListPrefixOrder", s.testListPrefixOrder},
		{"ListAtRevision", s.testListAtRevision},
		{"RevisionSharedAndMonotonic", s.testRevisionShared},
		{"WatchFromZero", s.testWatchFromZero},
		{"WatchFromRevision", s.testWatchFromRevision},
		{"WatchFutureRevision", s.testWatchFuture},
		{"WatchPrefixFilter", s.testWatchPrefix},
		{"WatchAfterCompaction", s.testWatchCompacted},
		{"CompactFuture", s.testCompactFuture},
		{"SlowWatcher", s.testSlowWatcher},
		{"WatchContextCancel", s.testWatchCancel},
		{"WatchUnderLoad", s.testWatchUnderLoad},
		{"ConcurrentCreateSameKey", s.testConcurrentCreate},
		{"ConcurrentUpdateCAS", s.testConcurrentCAS},
		{"RandomOpsMatchModel", s.testModel},
		{"Close", s.testClose},
		{"ReopenPersists", s.testReopen},
		{"CloseWaitsForWrites", s.testCloseWaits},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.fn)
	}
}

type suite struct {
	cfg      config
	newStore func(t *testing.T) store.Store
}

func (s *suite) open(t *testing.T) store.Store {
	t.Helper()
	st := s.newStore(t)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func (s *suite) reopen(t *testing.T, old store.Store) store.Store {
	t.Helper()
	st := s.cfg.reopen(t, old)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func mustCreate(t *testing.T, st store.Store, key, value string) int64 {
	t.Helper()
	rev, err := st.Create(t.Context(), key, []byte(value))
	if err != nil {
		t.Fatalf("Create(%q): %v", key, err)
	}
	return rev
}

func mustUpdate(t *testing.T, st store.Store, key, value string, expect int64) int64 {
	t.Helper()
	rev, err := st.Update(t.Context(), key, []byte(value), expect)
	if err != nil {
		t.Fatalf("Update(%q, expect %d): %v", key, expect, err)
	}
	return rev
}

func mustDelete(t *testing.T, st store.Store, key string, expect int64) int64 {
	t.Helper()
	_, rev, err := st.Delete(t.Context(), key, expect)
	if err != nil {
		t.Fatalf("Delete(%q, expect %d): %v", key, expect, err)
	}
	return rev
}

func mustRevision(t *testing.T, st store.Store) (int64, int64) {
	t.Helper()
	cur, comp, err := st.Revision(t.Context())
	if err != nil {
		t.Fatalf("Revision: %v", err)
	}
	return cur, comp
}

// wantErr checks errors.Is and that the message names what failed.
func wantErr(t *testing.T, op string, err, target error, mention string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", op, err, target)
	}
	if mention != "" && !strings.Contains(err.Error(), mention) {
		t.Errorf("%s: error %q does not mention %q", op, err, mention)
	}
}

func (s *suite) testCreateGet(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	key := "/pods/default/nginx"
	rev := mustCreate(t, st, key, "v1")
	if rev <= 0 {
		t.Fatalf("Create returned revision %d, want > 0", rev)
	}
	kv, err := st.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	want := store.KV{Key: key, Value: []byte("v1"), ModRevision: rev, CreateRevision: rev}
	if !equalKV(kv, want) {
		t.Fatalf("Get = %s, want %s", fmtKV(kv), fmtKV(want))
	}
	_, err = st.Create(ctx, key, []byte("v2"))
	wantErr(t, "second Create", err, store.ErrExists, key)
	if kv, _ := st.Get(ctx, key); string(kv.Value) != "v1" {
		t.Fatalf("failed Create changed the value to %q", kv.Value)
	}
	_, err = st.Get(ctx, "/pods/default/missing")
	wantErr(t, "Get missing", err, store.ErrNotFound, "/pods/default/missing")
	if cur, _ := mustRevision(t, st); cur != rev {
		t.Fatalf("failed Create moved the revision from %d to %d", rev, cur)
	}
	if _, err := st.Create(ctx, "", []byte("x")); err == nil {
		t.Fatalf("Create with an empty key succeeded")
	}
}

func (s *suite) testUpdateCAS(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	key := "/configmaps/default/c"
	r1 := mustCreate(t, st, key, "v1")
	r2 := mustUpdate(t, st, key, "v2", r1)
	if r2 <= r1 {
		t.Fatalf("Update revision %d not after create revision %d", r2, r1)
	}
	_, err := st.Update(ctx, key, []byte("stale"), r1)
	wantErr(t, "Update with stale revision", err, store.ErrConflict, key)
	kv, err := st.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	want := store.KV{Key: key, Value: []byte("v2"), ModRevision: r2, CreateRevision: r1}
	if !equalKV(kv, want) {
		t.Fatalf("after conflict Get = %s, want %s", fmtKV(kv), fmtKV(want))
	}
	_, err = st.Update(ctx, "/configmaps/default/none", []byte("x"), 0)
	wantErr(t, "Update missing", err, store.ErrNotFound, "/configmaps/default/none")
	_, err = st.Update(ctx, "/configmaps/default/none", []byte("x"), r2)
	wantErr(t, "Update missing with revision", err, store.ErrNotFound, "")
}

func (s *suite) testUpdateUnconditional(t *testing.T) {
	st := s.open(t)
	key := "/nodes/n1"
	r1 := mustCreate(t, st, key, "a")
	mustUpdate(t, st, key, "b", r1)
	r3 := mustUpdate(t, st, key, "c", 0)
	kv, err := st.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if string(kv.Value) != "c" || kv.ModRevision != r3 || kv.CreateRevision != r1 {
		t.Fatalf("after unconditional update Get = %s, want value c mod %d create %d", fmtKV(kv), r3, r1)
	}
}

func (s *suite) testDeletePrecondition(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	key := "/services/default/web"
	r1 := mustCreate(t, st, key, "svc")
	r2 := mustUpdate(t, st, key, "svc2", r1)
	_, _, err := st.Delete(ctx, key, r1)
	wantErr(t, "Delete with stale revision", err, store.ErrConflict, key)
	if _, err := st.Get(ctx, key); err != nil {
		t.Fatalf("failed Delete removed the key: %v", err)
	}
	prev, rd, err := st.Delete(ctx, key, r2)
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if rd <= r2 {
		t.Fatalf("Delete revision %d not after %d", rd, r2)
	}
	want := store.KV{Key: key, Value: []byte("svc2"), ModRevision: r2, CreateRevision: r1}
	if !equalKV(prev, want) {
		t.Fatalf("Delete returned %s, want the deleted object %s", fmtKV(prev), fmtKV(want))
	}
	_, err = st.Get(ctx, key)
	wantErr(t, "Get after Delete", err, store.ErrNotFound, key)
	_, _, err = st.Delete(ctx, key, 0)
	wantErr(t, "Delete missing", err, store.ErrNotFound, key)
	// The key is free again, and its new life starts a new CreateRevision.
	r4 := mustCreate(t, st, key, "again")
	kv, _ := st.Get(ctx, key)
	if kv.CreateRevision != r4 {
		t.Fatalf("recreated key has CreateRevision %d, want %d", kv.CreateRevision, r4)
	}
	if _, _, err := st.Delete(ctx, key, 0); err != nil {
		t.Fatalf("unconditional Delete: %v", err)
	}
}

func (s *suite) testEmptyValue(t *testing.T) {
	st := s.open(t)
	r := mustCreate(t, st, "/empty", "")
	kv, err := st.Get(t.Context(), "/empty")
	if err != nil {
		t.Fatal(err)
	}
	if len(kv.Value) != 0 || kv.ModRevision != r {
		t.Fatalf("Get = %s, want an empty value at %d", fmtKV(kv), r)
	}
}

func (s *suite) testCallerMayReuseValue(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	ch, err := st.Watch(ctx, "/reuse", 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := []byte("original")
	if _, err := st.Create(ctx, "/reuse", buf); err != nil {
		t.Fatal(err)
	}
	copy(buf, "CHANGED!")
	kv, _ := st.Get(ctx, "/reuse")
	if string(kv.Value) != "original" {
		t.Fatalf("stored value followed the caller's slice: %q", kv.Value)
	}
	evs := s.collect(t, ch, 1)
	if string(evs[0].KV.Value) != "original" {
		t.Fatalf("watched value followed the caller's slice: %q", evs[0].KV.Value)
	}
	kv.Value[0] = 'X'
	if again, _ := st.Get(ctx, "/reuse"); string(again.Value) != "original" {
		t.Fatalf("changing a Get result changed the store: %q", again.Value)
	}
}

func (s *suite) testListPrefixOrder(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	for _, k := range []string{"/pods/default/c", "/pods/default/a", "/pods/kube-system/x", "/pods/default/b", "/pods/defaultx/z", "/services/default/a"} {
		mustCreate(t, st, k, "v:"+k)
	}
	kvs, rev, err := st.List(ctx, "/pods/default/", 0)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	got := keys(kvs)
	want := []string{"/pods/default/a", "/pods/default/b", "/pods/default/c"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("List keys = %v, want %v", got, want)
	}
	for _, kv := range kvs {
		if string(kv.Value) != "v:"+kv.Key || kv.ModRevision <= 0 || kv.CreateRevision != kv.ModRevision {
			t.Errorf("List item %s is not what was created", fmtKV(kv))
		}
	}
	cur, _ := mustRevision(t, st)
	if rev != cur {
		t.Fatalf("List revision %d, want current %d", rev, cur)
	}
	all, _, err := st.List(ctx, "/pods/", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 5 {
		t.Fatalf("List /pods/ = %v, want 5 keys", keys(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i-1].Key >= all[i].Key {
			t.Fatalf("List not in key order: %v", keys(all))
		}
	}
	none, rev, err := st.List(ctx, "/nothing/", 0)
	if err != nil || len(none) != 0 || rev != cur {
		t.Fatalf("List of an empty prefix = %v, %d, %v; want nothing at %d", keys(none), rev, err, cur)
	}
	_, _, err = st.List(ctx, "/pods/", cur+1)
	wantErr(t, "List at a future revision", err, store.ErrFutureRevision, "")
}

func (s *suite) testListAtRevision(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	ra := mustCreate(t, st, "/p/a", "a1")
	rb := mustCreate(t, st, "/p/b", "b1")
	mustCreate(t, st, "/q/other", "o")
	snap, _ := mustRevision(t, st)
	before, rev, err := st.List(ctx, "/p/", 0)
	if err != nil || rev != snap {
		t.Fatalf("List latest: %v at %d, want revision %d", err, rev, snap)
	}
	ra2 := mustUpdate(t, st, "/p/a", "a2", ra)
	mustDelete(t, st, "/p/b", rb)
	mustCreate(t, st, "/p/c", "c1")
	mustUpdate(t, st, "/p/a", "a3", ra2)
	mustCreate(t, st, "/p/b", "b2")

	past, rev, err := st.List(ctx, "/p/", snap)
	if err != nil {
		t.Fatalf("List at %d: %v", snap, err)
	}
	if rev != snap {
		t.Fatalf("List at %d reports revision %d", snap, rev)
	}
	if !equalKVs(past, before) {
		t.Fatalf("List at %d = %s, want what it was then: %s", snap, fmtKVs(past), fmtKVs(before))
	}
	// Each intermediate revision too, checked against a replay of the log.
	cur, _ := mustRevision(t, st)
	for r := snap; r <= cur; r++ {
		got, _, err := st.List(ctx, "/p/", r)
		if err != nil {
			t.Fatalf("List at %d: %v", r, err)
		}
		if want := s.stateAt(t, st, "/p/", snap, before, r); !equalKVs(got, want) {
			t.Fatalf("List at %d = %s, want %s", r, fmtKVs(got), fmtKVs(want))
		}
	}
	latest, _, _ := st.List(ctx, "/p/", 0)
	atCur, _, _ := st.List(ctx, "/p/", cur)
	if !equalKVs(latest, atCur) {
		t.Fatalf("List at current %s differs from latest %s", fmtKVs(atCur), fmtKVs(latest))
	}
	if err := st.Compact(ctx, snap+1); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	_, _, err = st.List(ctx, "/p/", snap)
	wantErr(t, "List before the compacted revision", err, store.ErrCompacted, "")
	if _, _, err := st.List(ctx, "/p/", snap+1); err != nil {
		t.Fatalf("List at the compacted revision: %v", err)
	}
}

// stateAt rebuilds the list under prefix at revision r from the list at
// base and the watched events since, independently of the store's List.
func (s *suite) stateAt(t *testing.T, st store.Store, prefix string, base int64, baseKVs []store.KV, r int64) []store.KV {
	t.Helper()
	state := map[string]store.KV{}
	for _, kv := range baseKVs {
		state[kv.Key] = kv
	}
	if r > base {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		ch, err := st.Watch(ctx, prefix, base)
		if err != nil {
			t.Fatalf("Watch from %d: %v", base, err)
		}
		for _, ev := range s.collectUntil(t, ch, r) {
			if ev.KV.ModRevision > r {
				break
			}
			if ev.Type == store.EventDelete {
				delete(state, ev.KV.Key)
			} else {
				state[ev.KV.Key] = ev.KV
			}
		}
	}
	var out []store.KV
	for _, kv := range state {
		out = append(out, kv)
	}
	sortKVs(out)
	return out
}

func (s *suite) testRevisionShared(t *testing.T) {
	st := s.open(t)
	cur0, _ := mustRevision(t, st)
	last := cur0
	check := func(op string, rev int64) {
		t.Helper()
		if rev <= last {
			t.Fatalf("%s got revision %d, not after %d", op, rev, last)
		}
		last = rev
		if cur, _ := mustRevision(t, st); cur != rev {
			t.Fatalf("after %s Revision() = %d, want %d", op, cur, rev)
		}
	}
	r := mustCreate(t, st, "/a/1", "x")
	check("create /a/1", r)
	check("create /b/1", mustCreate(t, st, "/b/1", "x"))
	check("update /a/1", mustUpdate(t, st, "/a/1", "y", r))
	check("create /c/1", mustCreate(t, st, "/c/1", "x"))
	check("delete /b/1", mustDelete(t, st, "/b/1", 0))
	if _, err := st.Update(t.Context(), "/a/1", []byte("z"), r); err == nil {
		t.Fatal("stale update succeeded")
	}
	if cur, _ := mustRevision(t, st); cur != last {
		t.Fatalf("failed update moved the revision to %d from %d", cur, last)
	}
}

// testWatchFromZero: revision 0 is the empty store, so a watch from 0
// replays every change, then goes on live.
func (s *suite) testWatchFromZero(t *testing.T) {
	st := s.open(t)
	r1 := mustCreate(t, st, "/w/old", "old")
	mustCreate(t, st, "/other", "x")
	ch, err := st.Watch(t.Context(), "/w/", 0)
	if err != nil {
		t.Fatal(err)
	}
	r3 := mustCreate(t, st, "/w/new", "new")
	evs := s.collect(t, ch, 2)
	if evs[0].KV.Key != "/w/old" || evs[0].KV.ModRevision != r1 || !evs[0].Created || evs[0].Type != store.EventPut {
		t.Fatalf("watch from 0 delivered %s first, want the creation of /w/old at %d", fmtEvent(evs[0]), r1)
	}
	if evs[1].KV.Key != "/w/new" || evs[1].KV.ModRevision != r3 {
		t.Fatalf("watch from 0 delivered %s second, want the creation of /w/new at %d", fmtEvent(evs[1]), r3)
	}
}

func (s *suite) testWatchFromRevision(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	r1 := mustCreate(t, st, "/w/a", "a1")
	r2 := mustUpdate(t, st, "/w/a", "a2", r1)
	r3 := mustCreate(t, st, "/w/b", "b1")
	r4 := mustDelete(t, st, "/w/a", r2)
	ch, err := st.Watch(ctx, "/w/", r1)
	if err != nil {
		t.Fatalf("Watch from %d: %v", r1, err)
	}
	r5 := mustUpdate(t, st, "/w/b", "b2", r3)
	want := []store.Event{
		{Type: store.EventPut, KV: store.KV{Key: "/w/a", Value: []byte("a2"), ModRevision: r2, CreateRevision: r1}, PrevValue: []byte("a1")},
		{Type: store.EventPut, Created: true, KV: store.KV{Key: "/w/b", Value: []byte("b1"), ModRevision: r3, CreateRevision: r3}},
		{Type: store.EventDelete, KV: store.KV{Key: "/w/a", Value: []byte("a2"), ModRevision: r4, CreateRevision: r1}, PrevValue: []byte("a2")},
		{Type: store.EventPut, KV: store.KV{Key: "/w/b", Value: []byte("b2"), ModRevision: r5, CreateRevision: r3}, PrevValue: []byte("b1")},
	}
	got := s.collect(t, ch, len(want))
	for i := range want {
		if !equalEvent(got[i], want[i]) {
			t.Fatalf("event %d = %s, want %s", i, fmtEvent(got[i]), fmtEvent(want[i]))
		}
	}
	s.expectQuiet(t, ch, st, "/w/")

	// From the current revision: only what comes next.
	cur, _ := mustRevision(t, st)
	ch2, err := st.Watch(ctx, "/w/", cur)
	if err != nil {
		t.Fatalf("Watch from current %d: %v", cur, err)
	}
	r6 := mustCreate(t, st, "/w/c", "c")
	if evs := s.collect(t, ch2, 1); evs[0].KV.ModRevision != r6 {
		t.Fatalf("watch from current delivered %s first, want revision %d", fmtEvent(evs[0]), r6)
	}
}

// expectQuiet writes a marker under prefix and checks that it is the next
// thing ch delivers: nothing duplicated or unexpected came before it.
func (s *suite) expectQuiet(t *testing.T, ch <-chan store.WatchResult, st store.Store, prefix string) {
	t.Helper()
	key := prefix + "zz-marker"
	r := mustCreate(t, st, key, "m")
	evs := s.collect(t, ch, 1)
	if evs[0].KV.Key != key || evs[0].KV.ModRevision != r {
		t.Fatalf("unexpected event %s before the marker at %d", fmtEvent(evs[0]), r)
	}
}

func (s *suite) testWatchFuture(t *testing.T) {
	st := s.open(t)
	r := mustCreate(t, st, "/f", "x")
	_, err := st.Watch(t.Context(), "/", r+1)
	wantErr(t, "Watch from a future revision", err, store.ErrFutureRevision, "")
}

func (s *suite) testWatchPrefix(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	start, _ := mustRevision(t, st)
	mustCreate(t, st, "/pods/default/a", "1")
	chPods, err := st.Watch(ctx, "/pods/default/", start)
	if err != nil {
		t.Fatal(err)
	}
	chAll, err := st.Watch(ctx, "/", start)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, st, "/pods/other/a", "2")
	mustCreate(t, st, "/pods/defaultx/a", "3")
	mustCreate(t, st, "/services/default/a", "4")
	mustCreate(t, st, "/pods/default/b", "5")
	got := s.collect(t, chPods, 2)
	if got[0].KV.Key != "/pods/default/a" || got[1].KV.Key != "/pods/default/b" {
		t.Fatalf("prefix watch delivered %s, %s", fmtEvent(got[0]), fmtEvent(got[1]))
	}
	s.expectQuiet(t, chPods, st, "/pods/default/")
	all := s.collect(t, chAll, 6)
	for i := 1; i < len(all); i++ {
		if all[i].KV.ModRevision != all[i-1].KV.ModRevision+1 {
			t.Fatalf("watch of everything skipped from %d to %d", all[i-1].KV.ModRevision, all[i].KV.ModRevision)
		}
	}
}

func (s *suite) testWatchCompacted(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	var revs []int64
	for i := range 6 {
		revs = append(revs, mustCreate(t, st, fmt.Sprintf("/c/%d", i), "x"))
	}
	if err := st.Compact(ctx, revs[3]); err != nil {
		t.Fatalf("Compact(%d): %v", revs[3], err)
	}
	cur, comp := mustRevision(t, st)
	if comp != revs[3] || cur != revs[5] {
		t.Fatalf("Revision() = %d, %d; want %d, %d", cur, comp, revs[5], revs[3])
	}
	_, err := st.Watch(ctx, "/c/", revs[1])
	wantErr(t, "Watch before the compacted revision", err, store.ErrCompacted, "")
	ch, err := st.Watch(ctx, "/c/", revs[3])
	if err != nil {
		t.Fatalf("Watch from the compacted revision: %v", err)
	}
	evs := s.collect(t, ch, 2)
	if evs[0].KV.ModRevision != revs[4] || evs[1].KV.ModRevision != revs[5] {
		t.Fatalf("watch from compacted delivered %s, %s", fmtEvent(evs[0]), fmtEvent(evs[1]))
	}
	// Compacting backwards changes nothing.
	if err := st.Compact(ctx, revs[2]); err != nil {
		t.Fatalf("Compact to an older revision: %v", err)
	}
	if _, comp := mustRevision(t, st); comp != revs[3] {
		t.Fatalf("compacted revision moved back to %d", comp)
	}
	// Objects are untouched by compaction.
	kvs, _, err := st.List(ctx, "/c/", 0)
	if err != nil || len(kvs) != 6 {
		t.Fatalf("List after compaction: %d objects, %v", len(kvs), err)
	}
}

func (s *suite) testCompactFuture(t *testing.T) {
	st := s.open(t)
	r := mustCreate(t, st, "/x", "x")
	err := st.Compact(t.Context(), r+10)
	wantErr(t, "Compact past the current revision", err, store.ErrFutureRevision, "")
}

func (s *suite) testSlowWatcher(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	start, _ := mustRevision(t, st)
	slow, err := st.Watch(ctx, "/slow/", start)
	if err != nil {
		t.Fatal(err)
	}
	n := s.cfg.slowWriteCount
	// Nobody reads slow; every write must still complete (a store that
	// blocked writers on it would hang here).
	revs := s.writeConcurrently(t, st, "/slow/", 16, n)
	if len(revs) != n {
		t.Fatalf("%d of %d writes succeeded", len(revs), n)
	}
	var (
		last   = start
		ended  error
		closed bool
	)
	deadline := time.After(s.cfg.livenessTimeout)
	for !closed {
		if ended == nil && last-start == int64(n) {
			// Every event arrived: the watch was still replaying from the
			// log (which reads on demand and holds no backlog in memory)
			// when the writes happened, so it never fell behind a buffer.
			t.Logf("slow watcher was replaying and got all %d events without buffering them", n)
			break
		}
		select {
		case r, ok := <-slow:
			if !ok {
				closed = true
				break
			}
			if ended != nil {
				t.Fatalf("result after the final error: %+v", r)
			}
			if r.Err != nil {
				ended = r.Err
				continue
			}
			for _, ev := range r.Events {
				if ev.KV.ModRevision != last+1 {
					t.Fatalf("slow watcher got revision %d after %d", ev.KV.ModRevision, last)
				}
				last = ev.KV.ModRevision
			}
		case <-deadline:
			t.Fatalf("slow watcher channel neither ended nor closed")
		}
	}
	if !closed {
		return
	}
	if !errors.Is(ended, store.ErrWatcherTooSlow) {
		t.Fatalf("slow watcher ended with %v, want ErrWatcherTooSlow", ended)
	}
	if last-start >= int64(n) {
		t.Fatalf("slow watcher got all %d events and was still ended as too slow", n)
	}
	// The store goes on serving new watches from where the slow one was.
	ch := mustWatch(t, st, "/slow/", last)
	if evs := s.collectUntil(t, ch, start+int64(n)); int64(len(evs)) != start+int64(n)-last {
		t.Fatalf("re-watch from %d got %d events, want %d", last, len(evs), start+int64(n)-last)
	}
}

// writeConcurrently creates n keys under prefix from workers goroutines and
// returns the revisions acknowledged.
func (s *suite) writeConcurrently(t *testing.T, st store.Store, prefix string, workers, n int) []int64 {
	t.Helper()
	var (
		mu   sync.Mutex
		revs []int64
		errs []error
		wg   sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				rev, err := st.Create(context.Background(), fmt.Sprintf("%s%06d", prefix, i), []byte("v"))
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					revs = append(revs, rev)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d concurrent writes failed, first: %v", len(errs), errs[0])
	}
	return revs
}

func (s *suite) testWatchCancel(t *testing.T) {
	st := s.open(t)
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := st.Watch(ctx, "/", 0)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, st, "/k", "v")
	cancel()
	// Whatever was in flight may still arrive; then the channel closes,
	// with no error but the context's.
	deadline := time.After(s.cfg.livenessTimeout)
	for {
		select {
		case r, ok := <-ch:
			if !ok {
				mustCreate(t, st, "/k2", "v") // writers unaffected
				return
			}
			if r.Err != nil && !errors.Is(r.Err, context.Canceled) {
				t.Fatalf("cancelled watch ended with %v", r.Err)
			}
		case <-deadline:
			t.Fatal("cancelled watch's channel was not closed")
		}
	}
}

// testWatchUnderLoad starts watches from revisions taken while writers run:
// each must deliver exactly the revisions after its start, once, in order,
// whether they came from history or live.
func (s *suite) testWatchUnderLoad(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	const total = 400
	begin, _ := mustRevision(t, st)
	var (
		froms []int64
		got   = make([]chan []store.Event, 8)
	)
	writersDone := make(chan []int64)
	go func() { writersDone <- s.writeConcurrently(t, st, "/load/", 8, total) }()
	for i := range got {
		cur, _ := mustRevision(t, st)
		from := begin + (cur-begin)*int64(i%3)/2 // some from history, some from now
		ch, err := st.Watch(ctx, "/load/", from)
		if err != nil {
			t.Fatalf("Watch from %d: %v", from, err)
		}
		froms = append(froms, from)
		// Read while the writers run, as a real consumer does.
		got[i] = make(chan []store.Event, 1)
		go func() { got[i] <- s.collectQuietly(ctx, ch, int(begin+total-from)) }()
		time.Sleep(time.Millisecond)
	}
	revs := <-writersDone
	end := begin + int64(len(revs))
	for i, from := range froms {
		evs := <-got[i]
		for j, ev := range evs {
			if want := from + 1 + int64(j); ev.KV.ModRevision != want {
				t.Fatalf("watch from %d: event %d has revision %d, want %d", from, j, ev.KV.ModRevision, want)
			}
		}
		if int64(len(evs)) != end-from {
			t.Fatalf("watch from %d got %d events, want %d", from, len(evs), end-from)
		}
	}
}

func (s *suite) testConcurrentCreate(t *testing.T) {
	st := s.open(t)
	const n = 16
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []int
		others  []error
	)
	startGun := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startGun
			_, err := st.Create(context.Background(), "/race", []byte(fmt.Sprint(i)))
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				winners = append(winners, i)
			} else {
				others = append(others, err)
			}
		}()
	}
	close(startGun)
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("%d creates of one key succeeded, want exactly 1", len(winners))
	}
	for _, err := range others {
		if !errors.Is(err, store.ErrExists) {
			t.Fatalf("losing create got %v, want ErrExists", err)
		}
	}
	kv, err := st.Get(t.Context(), "/race")
	if err != nil || string(kv.Value) != fmt.Sprint(winners[0]) {
		t.Fatalf("Get = %s, %v; want the winner's value %d", fmtKV(kv), err, winners[0])
	}
}

// testConcurrentCAS runs read-modify-write increments from many goroutines:
// with compare-and-swap no increment may be lost.
func (s *suite) testConcurrentCAS(t *testing.T) {
	st := s.open(t)
	mustCreate(t, st, "/counter", "0")
	const workers, each = 8, 10
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for done := 0; done < each; {
				kv, err := st.Get(ctx, "/counter")
				if err != nil {
					errc <- err
					return
				}
				var v int
				fmt.Sscan(string(kv.Value), &v)
				_, err = st.Update(ctx, "/counter", []byte(fmt.Sprint(v+1)), kv.ModRevision)
				switch {
				case errors.Is(err, store.ErrConflict):
				case err != nil:
					errc <- err
					return
				default:
					done++
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("increment failed: %v", err)
	}
	kv, _ := st.Get(t.Context(), "/counter")
	if string(kv.Value) != fmt.Sprint(workers*each) {
		t.Fatalf("counter = %s, want %d", kv.Value, workers*each)
	}
}

func (s *suite) testClose(t *testing.T) {
	st := s.open(t)
	mustCreate(t, st, "/a", "x")
	ch, err := st.Watch(t.Context(), "/", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	deadline := time.After(s.cfg.livenessTimeout)
	for open := true; open; {
		select {
		case r, ok := <-ch:
			open = ok
			if ok && r.Err != nil && !errors.Is(r.Err, store.ErrClosed) {
				t.Fatalf("watch ended by Close with %v, want ErrClosed", r.Err)
			}
		case <-deadline:
			t.Fatal("Close left a watch open")
		}
	}
	_, err = st.Create(t.Context(), "/b", []byte("x"))
	wantErr(t, "Create after Close", err, store.ErrClosed, "")
	_, err = st.Get(t.Context(), "/a")
	wantErr(t, "Get after Close", err, store.ErrClosed, "")
	_, err = st.Watch(t.Context(), "/", 0)
	wantErr(t, "Watch after Close", err, store.ErrClosed, "")
}

func (s *suite) testReopen(t *testing.T) {
	if s.cfg.reopen == nil {
		t.Skip("the implementation under test gave no reopen hook (storetest.WithReopen)")
	}
	st := s.open(t)
	ctx := t.Context()
	r1 := mustCreate(t, st, "/r/a", "a1")
	mustUpdate(t, st, "/r/a", "a2", r1)
	mustCreate(t, st, "/r/b", "b")
	mustDelete(t, st, "/r/b", 0)
	mustCreate(t, st, "/r/c", "c")
	listBefore, revBefore, err := st.List(ctx, "/r/", 0)
	if err != nil {
		t.Fatal(err)
	}
	histBefore := s.collectUntil(t, mustWatch(t, st, "/r/", r1-1), revBefore)

	st = s.reopen(t, st)
	cur, _ := mustRevision(t, st)
	if cur != revBefore {
		t.Fatalf("revision after reopen %d, want %d", cur, revBefore)
	}
	listAfter, _, err := st.List(ctx, "/r/", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !equalKVs(listAfter, listBefore) {
		t.Fatalf("after reopen List = %s, want %s", fmtKVs(listAfter), fmtKVs(listBefore))
	}
	histAfter := s.collectUntil(t, mustWatch(t, st, "/r/", r1-1), revBefore)
	if len(histAfter) != len(histBefore) {
		t.Fatalf("history after reopen has %d events, want %d", len(histAfter), len(histBefore))
	}
	for i := range histBefore {
		if !equalEvent(histAfter[i], histBefore[i]) {
			t.Fatalf("history event %d after reopen = %s, want %s", i, fmtEvent(histAfter[i]), fmtEvent(histBefore[i]))
		}
	}
	if r := mustCreate(t, st, "/r/d", "d"); r != revBefore+1 {
		t.Fatalf("first write after reopen got revision %d, want %d", r, revBefore+1)
	}
	if err := st.Compact(ctx, revBefore); err != nil {
		t.Fatal(err)
	}
	st = s.reopen(t, st)
	if _, comp := mustRevision(t, st); comp != revBefore {
		t.Fatalf("compacted revision after reopen %d, want %d", comp, revBefore)
	}
}

// testCloseWaitsForWrites closes the store while writers run: every write
// that was acknowledged must be there after reopening.
func (s *suite) testCloseWaits(t *testing.T) {
	if s.cfg.reopen == nil {
		t.Skip("the implementation under test gave no reopen hook (storetest.WithReopen)")
	}
	st := s.open(t)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		acked = map[string]int64{}
	)
	started := make(chan struct{}, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				key := fmt.Sprintf("/cw/%d/%d", w, i)
				rev, err := st.Create(context.Background(), key, []byte(key))
				if errors.Is(err, store.ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("Create(%q): %v", key, err)
					return
				}
				mu.Lock()
				acked[key] = rev
				mu.Unlock()
				if i == 2 {
					started <- struct{}{}
				}
			}
		}()
	}
	for range 8 {
		<-started
	}
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	st = s.reopen(t, st)
	for key, rev := range acked {
		kv, err := st.Get(t.Context(), key)
		if err != nil {
			t.Fatalf("acknowledged write %q lost across Close: %v", key, err)
		}
		if kv.ModRevision != rev || string(kv.Value) != key {
			t.Fatalf("after reopen %s, want revision %d", fmtKV(kv), rev)
		}
	}
}

func mustWatch(t *testing.T, st store.Store, prefix string, from int64) <-chan store.WatchResult {
	t.Helper()
	ch, err := st.Watch(t.Context(), prefix, from)
	if err != nil {
		t.Fatalf("Watch(%q, %d): %v", prefix, from, err)
	}
	return ch
}

// collect reads exactly n events (more may have arrived in the same result:
// that is a failure, the caller expected n).
func (s *suite) collect(t *testing.T, ch <-chan store.WatchResult, n int) []store.Event {
	t.Helper()
	var out []store.Event
	deadline := time.After(s.cfg.livenessTimeout)
	for len(out) < n {
		select {
		case r, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed after %d of %d events", len(out), n)
			}
			if r.Err != nil {
				t.Fatalf("watch ended after %d of %d events: %v", len(out), n, r.Err)
			}
			out = append(out, r.Events...)
		case <-deadline:
			t.Fatalf("got %d of %d events within %s", len(out), n, s.cfg.livenessTimeout)
		}
	}
	if len(out) != n {
		t.Fatalf("got %d events, want %d: %s", len(out), n, fmtEvent(out[len(out)-1]))
	}
	return out
}

// collectUntil reads events until one at revision rev.
func (s *suite) collectUntil(t *testing.T, ch <-chan store.WatchResult, rev int64) []store.Event {
	t.Helper()
	var out []store.Event
	deadline := time.After(s.cfg.livenessTimeout)
	for len(out) == 0 || out[len(out)-1].KV.ModRevision < rev {
		select {
		case r, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed after %d events, before revision %d", len(out), rev)
			}
			if r.Err != nil {
				t.Fatalf("watch ended before revision %d: %v", rev, r.Err)
			}
			out = append(out, r.Events...)
		case <-deadline:
			t.Fatalf("revision %d not delivered within %s", rev, s.cfg.livenessTimeout)
		}
	}
	return out
}

// collectQuietly is collect for another goroutine: it returns what it got
// instead of failing the test.
func (s *suite) collectQuietly(ctx context.Context, ch <-chan store.WatchResult, n int) []store.Event {
	var out []store.Event
	deadline := time.After(s.cfg.livenessTimeout)
	for len(out) < n {
		select {
		case r, ok := <-ch:
			if !ok || r.Err != nil {
				return out
			}
			out = append(out, r.Events...)
		case <-ctx.Done():
			return out
		case <-deadline:
			return out
		}
	}
	return out
}

func keys(kvs []store.KV) []string {
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		out[i] = kv.Key
	}
	return out
}

func sortKVs(kvs []store.KV) {
	for i := 1; i < len(kvs); i++ {
		for j := i; j > 0 && kvs[j].Key < kvs[j-1].Key; j-- {
			kvs[j], kvs[j-1] = kvs[j-1], kvs[j]
		}
	}
}

func equalKV(a, b store.KV) bool {
	return a.Key == b.Key && bytes.Equal(a.Value, b.Value) && a.ModRevision == b.ModRevision && a.CreateRevision == b.CreateRevision
}

func equalKVs(a, b []store.KV) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !equalKV(a[i], b[i]) {
			return false
		}
	}
	return true
}

func equalEvent(a, b store.Event) bool {
	return a.Type == b.Type && a.Created == b.Created && equalKV(a.KV, b.KV) &&
		bytes.Equal(a.PrevValue, b.PrevValue) && (a.PrevValue == nil) == (b.PrevValue == nil)
}

func fmtKV(kv store.KV) string {
	return fmt.Sprintf("{%s=%q mod %d create %d}", kv.Key, kv.Value, kv.ModRevision, kv.CreateRevision)
}

func fmtKVs(kvs []store.KV) string {
	parts := make([]string, len(kvs))
	for i, kv := range kvs {
		parts[i] = fmtKV(kv)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func fmtEvent(e store.Event) string {
	prev := "<nil>"
	if e.PrevValue != nil {
		prev = fmt.Sprintf("%q", e.PrevValue)
	}
	return fmt.Sprintf("%s%s %s prev %s", e.Type, map[bool]string{true: "(created)"}[e.Created], fmtKV(e.KV), prev)
}

// Replaying the model test: its seed is random and logged; set
// SeedEnv to run that seed again, and OpsEnv for a longer run.
const (
	SeedEnv = "FLOTILLA_STORETEST_SEED"
	OpsEnv  = "FLOTILLA_STORETEST_OPS"
)

// modelOps is how many random operations the model test makes.
const modelOps = 2000

// modelSeed is the model test's seed: SeedEnv when set, else random.
func modelSeed(t *testing.T) uint64 {
	if v := os.Getenv(SeedEnv); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", SeedEnv, v, err)
		}
		return seed
	}
	return rand.Uint64()
}

// testModel drives random operations (writes with right and wrong
// preconditions, reads) against a map: every operation must have exactly
// the outcome the map predicts — a refused valid write fails as surely as
// an accepted invalid one — and then every past List and the replayed
// history must match it. The seed is random and logged.
func (s *suite) testModel(t *testing.T) {
	st := s.open(t)
	ctx := t.Context()
	seed := modelSeed(t)
	ops := modelOps
	if v := os.Getenv(OpsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive number", OpsEnv, v)
		}
		ops = n
	}
	t.Logf("seed %d, %d operations (replay: %s=%d)", seed, ops, SeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	model := map[string]store.KV{}
	snapshots := map[int64][]store.KV{}
	snapshot := func() []store.KV {
		var out []store.KV
		for _, kv := range model {
			out = append(out, kv)
		}
		slices.SortFunc(out, func(a, b store.KV) int { return strings.Compare(a.Key, b.Key) })
		return out
	}
	base, _ := mustRevision(t, st)
	snapshots[base] = nil
	rev := base
	for i := range ops {
		key := fmt.Sprintf("/m/%d", rng.IntN(12))
		val := []byte(fmt.Sprintf("v%d", i))
		cur, exists := model[key]
		expect := int64(0)
		if exists && rng.IntN(3) > 0 {
			expect = cur.ModRevision
			if rng.IntN(4) == 0 {
				expect++ // stale or future: must conflict
			}
		}
		// The outcome the model predicts for an update or a delete.
		var want error
		switch {
		case !exists:
			want = store.ErrNotFound
		case expect != 0 && expect != cur.ModRevision:
			want = store.ErrConflict
		}
		var (
			got int64
			err error
			op  string
		)
		switch rng.IntN(7) {
		case 0, 1:
			op = "create"
			want = nil
			if exists {
				want = store.ErrExists
			}
			got, err = st.Create(ctx, key, val)
			if err == nil {
				model[key] = store.KV{Key: key, Value: val, ModRevision: got, CreateRevision: got}
			}
		case 2, 3:
			op = fmt.Sprintf("update (expecting revision %d)", expect)
			got, err = st.Update(ctx, key, val, expect)
			if err == nil {
				model[key] = store.KV{Key: key, Value: val, ModRevision: got, CreateRevision: cur.CreateRevision}
			}
		case 4, 5:
			op = fmt.Sprintf("delete (expecting revision %d)", expect)
			var prev store.KV
			prev, got, err = st.Delete(ctx, key, expect)
			if err == nil {
				if !equalKV(prev, cur) {
					t.Fatalf("seed %d op %d: delete of %s returned %s, want %s", seed, i, key, fmtKV(prev), fmtKV(cur))
				}
				delete(model, key)
			}
		default:
			kv, err := st.Get(ctx, key)
			switch {
			case !exists && !errors.Is(err, store.ErrNotFound):
				t.Fatalf("seed %d op %d: get of missing %s = %s, %v; want ErrNotFound", seed, i, key, fmtKV(kv), err)
			case exists && (err != nil || !equalKV(kv, cur)):
				t.Fatalf("seed %d op %d: get of %s = %s, %v; want %s", seed, i, key, fmtKV(kv), err, fmtKV(cur))
			}
			continue
		}
		// Exactly the predicted outcome: the wanted error, or success.
		switch {
		case want == nil && err != nil:
			t.Fatalf("seed %d op %d: %s of %s (at %d, exists %v) refused: %v", seed, i, op, key, cur.ModRevision, exists, err)
		case want != nil && !errors.Is(err, want):
			t.Fatalf("seed %d op %d: %s of %s (at %d, exists %v) = %v, want %v", seed, i, op, key, cur.ModRevision, exists, err, want)
		case err != nil:
			continue
		}
		if got != rev+1 {
			t.Fatalf("seed %d op %d: %s %s got revision %d, want %d", seed, i, op, key, got, rev+1)
		}
		rev = got
		snapshots[rev] = snapshot()
	}
	for r := base; r <= rev; r++ {
		want := snapshots[r]
		if r == 0 {
			// List at 0 is the latest; the empty store is covered by the
			// replay below.
			want = snapshots[rev]
		}
		kvs, at, err := st.List(ctx, "/m/", r)
		if err != nil {
			t.Fatalf("seed %d: List at %d: %v", seed, r, err)
		}
		if r != 0 && at != r {
			t.Fatalf("seed %d: List at %d reports %d", seed, r, at)
		}
		if !equalKVs(kvs, want) {
			t.Fatalf("seed %d: List at %d = %s, want %s", seed, r, fmtKVs(kvs), fmtKVs(want))
		}
	}
	// Replaying the history from the start rebuilds every snapshot.
	replayed := map[string]store.KV{}
	for _, ev := range s.collectUntil(t, mustWatch(t, st, "/m/", base), rev) {
		if ev.Type == store.EventDelete {
			delete(replayed, ev.KV.Key)
		} else {
			replayed[ev.KV.Key] = ev.KV
		}
		model = replayed
		if want := snapshots[ev.KV.ModRevision]; !equalKVs(snapshot(), want) {
			t.Fatalf("seed %d: replay at %d = %s, want %s", seed, ev.KV.ModRevision, fmtKVs(snapshot()), fmtKVs(want))
		}
	}
}
