package boltstore

import (
	"context"
	"errors"
	"fmt"
	rtmetrics "runtime/metrics"
	"time"

	bolt "go.etcd.io/bbolt"

	"flotilla.dev/flotilla/hub/store"
)

type opKind int

const (
	opCreate opKind = iota + 1
	opUpdate
	opDelete
)

func (k opKind) String() string {
	switch k {
	case opCreate:
		return "create"
	case opUpdate:
		return "update"
	case opDelete:
		return "delete"
	}
	return "write"
}

// writeOp is one write waiting for a commit. The write loop owns it from
// the moment it is queued until it sends on done.
type writeOp struct {
	ctx       context.Context
	kind      opKind
	key       string
	value     []byte
	expectRev int64
	done      chan writeResult
}

type writeResult struct {
	rev  int64
	prev store.KV
	err  error
}

// Create stores value at key if the key is free.
func (s *Store) Create(ctx context.Context, key string, value []byte) (int64, error) {
	r := s.write(ctx, &writeOp{kind: opCreate, key: key, value: value})
	return r.rev, r.err
}

// Update replaces the value at key if its ModRevision is expectRev (0:
// whatever it is).
func (s *Store) Update(ctx context.Context, key string, value []byte, expectRev int64) (int64, error) {
	r := s.write(ctx, &writeOp{kind: opUpdate, key: key, value: value, expectRev: expectRev})
	return r.rev, r.err
}

// Delete removes key if its ModRevision is expectRev (0: whatever it is).
func (s *Store) Delete(ctx context.Context, key string, expectRev int64) (store.KV, int64, error) {
	r := s.write(ctx, &writeOp{kind: opDelete, key: key, expectRev: expectRev})
	return r.prev, r.rev, r.err
}

// write queues op for the write loop and waits for its commit. Once queued,
// the outcome is waited for even if ctx ends: the loop drops ops whose
// context ended before their transaction, so an error always means "not
// written" and success always means "durable".
func (s *Store) write(ctx context.Context, op *writeOp) writeResult {
	if err := validKey(op.key); err != nil {
		return writeResult{err: fmt.Errorf("%s %q: %w", op.kind, op.key, err)}
	}
	if op.expectRev < 0 {
		return writeResult{err: fmt.Errorf("%s %q: expected revision %d: must be 0 (any) or positive", op.kind, op.key, op.expectRev)}
	}
	if err := ctx.Err(); err != nil {
		return writeResult{err: fmt.Errorf("%s %q: %w", op.kind, op.key, err)}
	}
	// The caller may reuse its slice; the value also goes to watchers.
	if op.value != nil {
		op.value = clone(op.value)
	} else if op.kind != opDelete {
		op.value = []byte{}
	}
	op.ctx = ctx
	op.done = make(chan writeResult, 1)

	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return writeResult{err: fmt.Errorf("%s %q: %w", op.kind, op.key, store.ErrClosed)}
	}
	s.inflight.Add(1)
	s.mu.RUnlock()
	defer s.inflight.Done()

	s.ops <- op
	r := <-op.done
	if r.err != nil {
		r.err = fmt.Errorf("%s %q: %w", op.kind, op.key, r.err)
	}
	return r
}

func validKey(key string) error {
	switch {
	case key == "":
		return errors.New("empty key")
	case len(key) > maxKeySize:
		return fmt.Errorf("key of %d bytes exceeds the %d byte limit", len(key), maxKeySize)
	}
	return nil
}

// writeLoop is the single writer: it takes whatever writes are queued
// (while one commit syncs, the next batch gathers), applies them in one
// transaction, commits, publishes the events and answers each writer.
//
// Without more, N steady writers split into two groups that alternate
// between "waiting for the commit" and "queued for the next one", and each
// commit carries only about N/2 writes. So when the last commit carried
// several writes, the loop waits up to MaxBatchDelay for as many again: the
// writers just answered usually come back within microseconds, and a sync
// costs milliseconds. And when writes queued up while the last commit
// synced — independent writers, such as a fleet's Lease renewals,
// arriving faster than commits end — the loop waits up to MaxBatchDelay
// for more of them: every commit costs an fsync, a meta page and the
// b-tree pages it rewrites, a large share of a small write's CPU. A write
// to an idle store, or a lone writer's next write, waits for nothing.
func (s *Store) writeLoop() {
	defer close(s.writerDone)
	batch := make([]*writeOp, 0, s.opts.MaxBatchOps)
	last := 0
	// busy: writes arrived while the last commit synced — independent
	// writers (a fleet's Lease renewals) outpace the commits.
	busy := false
	var linger *time.Timer
	for {
		var first *writeOp
		select {
		case first = <-s.ops:
		case <-s.stopWriter:
			return
		}
		batch = append(batch[:0], first)
		size := len(first.value)
		full := func() bool { return len(batch) >= s.opts.MaxBatchOps || size >= s.opts.MaxBatchBytes }
	gather:
		for !full() {
			select {
			case op := <-s.ops:
				batch = append(batch, op)
				size += len(op.value)
			default:
				break gather
			}
		}
		var wait time.Duration
		want := last
		switch {
		case s.opts.MaxBatchDelay <= 0 || full():
		case busy:
			wait, want = s.opts.MaxBatchDelay, s.opts.MaxBatchOps
		case last > 1 && len(batch) < last:
			wait = s.opts.MaxBatchDelay
		}
		if wait > 0 {
			if linger == nil {
				linger = time.NewTimer(wait)
			} else {
				linger.Reset(wait)
			}
		wait:
			for len(batch) < want && !full() {
				select {
				case op := <-s.ops:
					batch = append(batch, op)
					size += len(op.value)
				case <-linger.C:
					break wait
				}
			}
			linger.Stop()
		}
		last = len(batch)
		s.commit(batch)
		clear(batch)
		busy = len(s.ops) > 0
	}
}

// commit applies batch in one transaction. A write whose precondition fails
// gets its error and changes nothing, without affecting the others; a
// failure of the transaction itself fails every write in it.
func (s *Store) commit(batch []*writeOp) {
	results := make([]writeResult, len(batch))
	events, err := s.applyBatch(batch, results)
	if err != nil {
		s.log.Error("store commit failed", "writes", len(batch), "err", err)
		for i := range batch {
			if results[i].err == nil {
				results[i] = writeResult{err: fmt.Errorf("commit: %w", err)}
			}
		}
	} else if len(events) > 0 {
		last := events[len(events)-1].KV.ModRevision
		s.rev.Store(last)
		s.hub.publish(events, last)
		s.maybeAutoCompact(last)
	}
	for i, op := range batch {
		op.done <- results[i]
	}
}

func (s *Store) applyBatch(batch []*writeOp, results []writeResult) ([]store.Event, error) {
	began := time.Now()
	tx, err := s.db.Begin(true)
	locked := time.Since(began)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	objs := tx.Bucket(objectsBucket)
	evs := tx.Bucket(eventsBucket)
	// Events are appended in revision order; full pages waste no space.
	evs.FillPercent = 1.0
	meta := tx.Bucket(metaBucket)
	rev, _ := readMeta(tx)

	events := make([]store.Event, 0, len(batch))
	for i, op := range batch {
		if err := op.ctx.Err(); err != nil {
			results[i].err = err
			continue
		}
		rec, prev, err := s.check(objs, op)
		if err != nil {
			results[i].err = err
			continue
		}
		next := rev + 1
		if rec.Created {
			rec.CreateRev = next
		}
		key := []byte(op.key)
		if op.kind == opDelete {
			err = objs.Delete(key)
		} else {
			err = objs.Put(key, encodeObject(rec.CreateRev, next, op.value))
		}
		if err == nil {
			err = evs.Put(encodeRev(next), encodeEvent(rec))
		}
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", op.kind, op.key, err)
		}
		rev = next
		results[i] = writeResult{rev: rev, prev: prev}
		events = append(events, rec.storeEvent(rev))
	}
	if len(events) == 0 {
		return nil, nil
	}
	if err := meta.Put(metaRev, encodeRev(rev)); err != nil {
		return nil, fmt.Errorf("store revision: %w", err)
	}
	gcs := gcCycles()
	start := time.Now()
	err = tx.Commit()
	committed = true
	took := time.Since(start)
	s.met.observeCommit(took, len(events))
	if err != nil {
		return nil, err
	}
	if took >= slowCommit || locked >= slowCommit {
		s.reportSlowCommit(tx, len(events), locked, took, gcCycles()-gcs)
	}
	return events, nil
}

// slowCommit is when a commit holds up the writes behind it long enough
// for clients to notice: a fleet's Lease renewals queue up behind it.
const slowCommit = 250 * time.Millisecond

// reportSlowCommit says where a slow commit spent its time, in bbolt's
// phases: waiting for the write lock (a compaction chunk holds it),
// rebalancing after deletes, spilling nodes onto pages (which may remap a
// grown file, waiting for every open read transaction), and writing the
// pages and syncing them; "other" is the file growing. Garbage collection
// cycles that ran meanwhile point at the process instead of the disk.
func (s *Store) reportSlowCommit(tx *bolt.Tx, writes int, locked, took time.Duration, gcs uint64) {
	st := tx.Stats()
	phases := st.GetRebalanceTime() + st.GetSpillTime() + st.GetWriteTime()
	s.log.Warn("slow store commit",
		"took", took.Round(time.Millisecond),
		"lockWait", locked.Round(time.Millisecond),
		"rebalance", st.GetRebalanceTime().Round(time.Millisecond),
		"spill", st.GetSpillTime().Round(time.Millisecond),
		"write", st.GetWriteTime().Round(time.Millisecond),
		"other", max(took-phases, 0).Round(time.Millisecond),
		"writes", writes,
		"pagesWritten", st.GetWrite(),
		"gcCycles", gcs)
}

var gcSample = []rtmetrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}

// gcCycles reads the process's completed GC cycles; only the write loop
// calls it, so the shared sample needs no lock.
func gcCycles() uint64 {
	rtmetrics.Read(gcSample)
	if gcSample[0].Value.Kind() != rtmetrics.KindUint64 {
		return 0
	}
	return gcSample[0].Value.Uint64()
}

// check tests op's precondition against the key's current object and
// returns the event it will log and, for a delete, the removed object.
func (s *Store) check(objs *bolt.Bucket, op *writeOp) (eventRecord, store.KV, error) {
	raw := objs.Get([]byte(op.key))
	if op.kind == opCreate {
		if raw != nil {
			return eventRecord{}, store.KV{}, store.ErrExists
		}
		return eventRecord{Type: store.EventPut, Created: true, Key: op.key, Value: op.value}, store.KV{}, nil
	}
	if raw == nil {
		return eventRecord{}, store.KV{}, store.ErrNotFound
	}
	createRev, modRev, value, err := decodeObject(raw)
	if err != nil {
		return eventRecord{}, store.KV{}, err
	}
	if op.expectRev != 0 && op.expectRev != modRev {
		return eventRecord{}, store.KV{}, fmt.Errorf("expected revision %d, object is at %d: %w", op.expectRev, modRev, store.ErrConflict)
	}
	// value lives in bbolt's pages, which the commit may reuse.
	prev := clone(value)
	rec := eventRecord{Key: op.key, CreateRev: createRev, PrevModRev: modRev, PrevValue: prev}
	if op.kind == opDelete {
		rec.Type = store.EventDelete
		rec.Value = prev
		return rec, store.KV{Key: op.key, Value: prev, CreateRevision: createRev, ModRevision: modRev}, nil
	}
	rec.Type = store.EventPut
	rec.Value = op.value
	return rec, store.KV{}, nil
}
