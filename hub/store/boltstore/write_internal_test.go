package boltstore

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"flotilla.dev/flotilla/internal/testlog"
)

// TestQueuedWritesWaitForCompany: a write that queued up while a commit
// synced shares the next commit with one arriving within MaxBatchDelay,
// while a write to an idle store is committed at once.
func TestQueuedWritesWaitForCompany(t *testing.T) {
	// Two writes fill a batch, and the delay would outlast the test: a
	// batch that waits is committed by its second write, one that does
	// not wait is committed alone.
	s, err := Open(filepath.Join(t.TempDir(), "state.db"), Options{MaxBatchOps: 2, MaxBatchDelay: time.Hour, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	create := func(key string) <-chan error {
		errc := make(chan error, 1)
		go func() {
			_, err := s.Create(ctx, key, []byte("v"))
			errc <- err
		}()
		return errc
	}
	wait := func(what string, errc <-chan error) {
		t.Helper()
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-ctx.Done():
			t.Fatalf("%s: not committed", what)
		}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("waiting for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}

	wait("a write to an idle store", create("/k/idle"))

	// Hold the commit after its transaction, before it is answered: a
	// write arriving meanwhile queues up.
	rev := s.ov.current()
	s.hub.mu.Lock()
	// Queued by hand, to know when the write loop has taken each.
	enqueue := func(key string) <-chan error {
		op := &writeOp{ctx: ctx, kind: opCreate, key: key, value: []byte("v"), done: make(chan writeResult, 1)}
		s.ops <- op
		errc := make(chan error, 1)
		go func() { errc <- (<-op.done).err }()
		return errc
	}
	first := enqueue("/k/first")
	waitFor("the first write's transaction", func() bool { return s.ov.current() > rev })
	queued := enqueue("/k/queued")
	s.hub.mu.Unlock()
	wait("the first write", first)
	waitFor("the queued write to be taken", func() bool { return len(s.ops) == 0 })
	// Long enough for a commit that does not wait to be done.
	time.Sleep(50 * time.Millisecond)
	late := create("/k/late")
	wait("the queued write", queued)
	wait("the late write", late)

	if got, want := batchSizes(t, s), "4 writes in 3 commits"; got != want {
		t.Errorf("%s, want %s (the queued and the late write together)", got, want)
	}
}

func batchSizes(t *testing.T, s *Store) string {
	t.Helper()
	var m dto.Metric
	if err := s.met.batch.Write(&m); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%v writes in %d commits", m.GetHistogram().GetSampleSum(), m.GetHistogram().GetSampleCount())
}

// TestWritesDoNotWaitForTheTree: while the b-tree's write lock is held (as
// by a compaction chunk or a slow checkpoint), writes are still logged,
// acknowledged and readable; the checkpoint that waited for the lock is
// reported with the time it waited, so that an operator can tell the
// store's stalls from the disk's.
func TestWritesDoNotWaitForTheTree(t *testing.T) {
	var logged testlog.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	s, err := Open(filepath.Join(t.TempDir(), "state.db"), Options{Logger: log, CheckpointInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.slowCheckpointAfter = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Create(ctx, "/quick", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logged.String(), "slow store") {
		t.Errorf("a quick commit was reported slow:\n%s", logged.String())
	}

	tx, err := s.db.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := s.Create(ctx, "/held", []byte("v"))
	if err != nil {
		t.Fatalf("a write while the b-tree's write lock is held: %v", err)
	}
	if kv, err := s.Get(ctx, "/held"); err != nil || kv.ModRevision != rev {
		t.Fatalf("get what was just acknowledged: %+v, %v", kv, err)
	}
	ckErr := make(chan error, 1)
	go func() { ckErr <- s.checkpoint() }()
	time.Sleep(s.slowCheckpointAfter + 100*time.Millisecond)
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-ckErr; err != nil {
		t.Fatal(err)
	}
	if got := s.ov.checkpointed(); got != rev {
		t.Errorf("checkpointed through %d, want %d", got, rev)
	}
	out := logged.String()
	if strings.Contains(out, "slow store commit") {
		t.Errorf("a write was slow although only the b-tree was held:\n%s", out)
	}
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, `msg="slow store checkpoint"`) {
			line = l
		}
	}
	if line == "" || !strings.Contains(line, "writes=2") {
		t.Fatalf("a checkpoint of 2 writes that waited for the write lock was not reported:\n%s", out)
	}
	wait := regexp.MustCompile(`lockWait=(\S+)`).FindStringSubmatch(line)
	if wait == nil {
		t.Fatalf("no lockWait: %s", line)
	}
	if d, err := time.ParseDuration(wait[1]); err != nil || d < s.slowCheckpointAfter {
		t.Errorf("lockWait %q, want at least %v: %s", wait[1], s.slowCheckpointAfter, line)
	}
}
