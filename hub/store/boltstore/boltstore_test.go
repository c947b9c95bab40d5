package boltstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"flotilla.dev/flotilla/hub/store"
	"flotilla.dev/flotilla/hub/store/boltstore"
	"flotilla.dev/flotilla/hub/store/storetest"
)

// testOptions keep the watch buffer small so that the contract suite's slow
// watcher overflows it quickly.
var testOptions = boltstore.Options{WatchBuffer: 256}

func openAt(t *testing.T, path string, opts boltstore.Options) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func openTemp(t *testing.T, opts boltstore.Options) *boltstore.Store {
	t.Helper()
	return openAt(t, filepath.Join(t.TempDir(), "state.db"), opts)
}

func TestContract(t *testing.T) {
	storetest.Run(t,
		func(t *testing.T) store.Store { return openTemp(t, testOptions) },
		storetest.WithReopen(func(t *testing.T, old store.Store) store.Store {
			bs := old.(*boltstore.Store)
			if err := bs.Close(); err != nil {
				t.Fatalf("Close before reopen: %v", err)
			}
			return openAt(t, bs.Path(), testOptions)
		}),
		storetest.WithSlowWatcherWrites(2000),
	)
}

func TestOpenLockedFile(t *testing.T) {
	s := openTemp(t, boltstore.Options{})
	_, err := boltstore.Open(s.Path(), boltstore.Options{LockTimeout: 50 * time.Millisecond})
	if err == nil {
		t.Fatal("second Open of a file in use succeeded")
	}
	if !strings.Contains(err.Error(), s.Path()) || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("error %q should name the file and say it is locked", err)
	}
}

func TestOpenMissingDir(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-such-dir", "state.db")
	_, err := boltstore.Open(path, boltstore.Options{})
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open in a missing directory: %v, want an error naming %s", err, path)
	}
}

func TestKeyLimits(t *testing.T) {
	s := openTemp(t, boltstore.Options{})
	ctx := t.Context()
	_, err := s.Create(ctx, strings.Repeat("k", 40000), []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("Create with a 40000 byte key: %v, want a size error", err)
	}
	if _, err := s.Update(ctx, "/x", []byte("x"), -1); err == nil {
		t.Fatal("Update with a negative revision succeeded")
	}
	if _, _, err := s.List(ctx, "/", -1); err == nil {
		t.Fatal("List at a negative revision succeeded")
	}
	if cur, _, _ := s.Revision(ctx); cur != 0 {
		t.Fatalf("refused writes moved the revision to %d", cur)
	}
}

// A write whose context ended before its transaction is not written, and
// says so.
func TestCancelledWriteNotWritten(t *testing.T) {
	s := openTemp(t, boltstore.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Create(ctx, "/c", []byte("x"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Create with a cancelled context: %v", err)
	}
	if _, err := s.Get(t.Context(), "/c"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("cancelled create was written: %v", err)
	}
}

func TestAutoCompaction(t *testing.T) {
	s := openTemp(t, boltstore.Options{HistoryLimit: 20})
	ctx := t.Context()
	for i := range 60 {
		if _, err := s.Create(ctx, fmt.Sprintf("/a/%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	// Compaction runs in the background; wait for it to catch up.
	var cur, comp int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		cur, comp, err = s.Revision(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if cur-comp <= 22 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if cur != 60 || cur-comp > 22 || comp == 0 {
		t.Fatalf("after 60 writes with HistoryLimit 20: current %d, compacted %d", cur, comp)
	}
	if _, err := s.Watch(ctx, "/", comp-1); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("Watch before the compacted revision: %v", err)
	}
	kvs, _, err := s.List(ctx, "/a/", 0)
	if err != nil || len(kvs) != 60 {
		t.Fatalf("compaction touched objects: %d listed, %v", len(kvs), err)
	}
}

func TestNoAutoCompactionWhenDisabled(t *testing.T) {
	s := openTemp(t, boltstore.Options{HistoryLimit: -1})
	for i := range 30 {
		if _, err := s.Create(t.Context(), fmt.Sprintf("/a/%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Watch(t.Context(), "/", 1); err != nil {
		t.Fatalf("watch from the first revision with unlimited history: %v", err)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	path := filepath.Join(t.TempDir(), "state.db")
	s := openAt(t, path, boltstore.Options{Registerer: reg})
	ctx := t.Context()
	for i := range 3 {
		if _, err := s.Create(ctx, fmt.Sprintf("/m/%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	ch, err := s.Watch(wctx, "/m/", 3)
	if err != nil {
		t.Fatal(err)
	}
	// The watch is live once it delivers a live event.
	if _, err := s.Create(ctx, "/m/live", []byte("x")); err != nil {
		t.Fatal(err)
	}
	<-ch
	got := gather(t, reg)
	if got["flotilla_store_revision"] != 4 {
		t.Errorf("flotilla_store_revision = %v, want 4", got["flotilla_store_revision"])
	}
	if got["flotilla_store_commit_duration_seconds"] != 4 {
		t.Errorf("flotilla_store_commit_duration_seconds count = %v, want 4 commits", got["flotilla_store_commit_duration_seconds"])
	}
	if got["flotilla_store_watchers"] != 1 {
		t.Errorf("flotilla_store_watchers = %v, want 1", got["flotilla_store_watchers"])
	}
	cancel()
	for range ch {
	}
	// Close unregisters, so a store reopened in the same process can
	// register again.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	openAt(t, path, boltstore.Options{Registerer: reg})
	if got := gather(t, reg); got["flotilla_store_revision"] != 4 || got["flotilla_store_watchers"] != 0 {
		t.Fatalf("after reopen metrics = %v", got)
	}
}

// gather returns gauge values and histogram sample counts by name.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_GAUGE:
				out[mf.GetName()] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[mf.GetName()] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// Concurrent writers share commits: 16 writers making 400 creates need
// fewer commits than creates.
func TestConcurrentWritesShareCommits(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := openTemp(t, boltstore.Options{Registerer: reg})
	const writers, total = 16, 400
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < total; i += writers {
				if _, err := s.Create(context.Background(), fmt.Sprintf("/b/%d", i), []byte("x")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	commits := gather(t, reg)["flotilla_store_commit_duration_seconds"]
	if commits >= total {
		t.Fatalf("%d concurrent creates took %v commits: writes were not batched", total, commits)
	}
	t.Logf("%d creates from %d writers in %v commits", total, writers, commits)
}

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashHelperEnv); dir != "" {
		if err := crashHelper(dir); err != nil {
			fmt.Fprintln(os.Stderr, "crash helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A compaction that overtakes a watch still replaying the log ends that
// watch with ErrCompacted after the events it could deliver, in order.
func TestCompactionDuringReplay(t *testing.T) {
	s := openTemp(t, boltstore.Options{HistoryLimit: -1})
	ctx := t.Context()
	const n = 1500 // several replay chunks
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				if _, err := s.Create(context.Background(), fmt.Sprintf("/r/%05d", i), []byte("x")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	ch, err := s.Watch(ctx, "/r/", 0)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing is read yet: the replay holds at most its first chunk.
	if err := s.Compact(ctx, n); err != nil {
		t.Fatal(err)
	}
	var next int64 = 1
	var end error
	for r := range ch {
		if r.Err != nil {
			end = r.Err
			continue
		}
		for _, ev := range r.Events {
			if ev.KV.ModRevision != next {
				t.Fatalf("replay delivered revision %d, want %d", ev.KV.ModRevision, next)
			}
			next++
		}
	}
	if !errors.Is(end, store.ErrCompacted) {
		t.Fatalf("overtaken watch ended with %v after %d events, want ErrCompacted", end, next-1)
	}
	if next > n {
		t.Fatalf("overtaken watch delivered all %d events", n)
	}
}
