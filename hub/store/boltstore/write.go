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
		s.hub.publish(events, last)
		s.maybeAutoCompact(last)
	}
	for i, op := range batch {
		op.done <- results[i]
	}
}

// applyBatch checks each write's precondition against the newest state of
// its key (this batch's earlier writes, then the overlay, then the
// b-tree), logs the writes that pass in one record with one sync, and
// then makes them visible in the overlay. The b-tree gets them at the next
// checkpoint.
func (s *Store) applyBatch(batch []*writeOp, results []writeResult) ([]store.Event, error) {
	if s.walFailed != nil {
		return nil, fmt.Errorf("the store's log could not be written earlier, so nothing more is (restart the hub; it recovers what was acknowledged): %w", s.walFailed)
	}
	if err := s.waitForRoom(); err != nil {
		return nil, err
	}
	rev := s.ov.rev // only this goroutine changes it
	first := rev + 1
	pending := make([]pendingEvent, 0, len(batch))
	var local map[string]pendingKey
	if len(batch) > 1 {
		local = make(map[string]pendingKey, len(batch))
	}
	// Under the overlay's read lock no checkpoint prunes, so a key the
	// overlay does not have is in the b-tree as of a transaction begun
	// here.
	var tx *bolt.Tx
	s.ov.mu.RLock()
	lookup := func(key string) (pendingKey, bool, error) {
		if p, ok := local[key]; ok {
			return p, !p.deleted, nil
		}
		if p, ok := s.ov.keys[key]; ok {
			return p, !p.deleted, nil
		}
		if tx == nil {
			var err error
			if tx, err = s.db.Begin(false); err != nil {
				return pendingKey{}, false, fmt.Errorf("begin: %w", err)
			}
		}
		raw := tx.Bucket(objectsBucket).Get([]byte(key))
		if raw == nil {
			return pendingKey{}, false, nil
		}
		c, m, v, err := decodeObject(raw)
		// v lives in bbolt's memory map, valid only for the transaction.
		return pendingKey{value: clone(v), createRev: c, modRev: m}, err == nil, err
	}
	var failed error
	for i, op := range batch {
		if err := op.ctx.Err(); err != nil {
			results[i].err = err
			continue
		}
		rec, prev, err := check(lookup, op)
		if errors.Is(err, errLookup) {
			failed = err
			break
		}
		if err != nil {
			results[i].err = err
			continue
		}
		next := rev + 1
		if rec.Created {
			rec.CreateRev = next
		}
		if local != nil {
			local[op.key] = pendingKey{value: rec.Value, createRev: rec.CreateRev, modRev: next, deleted: op.kind == opDelete}
		}
		pending = append(pending, pendingEvent{rec: rec, raw: encodeEvent(rec)})
		rev = next
		results[i] = writeResult{rev: rev, prev: prev}
	}
	if tx != nil {
		_ = tx.Rollback()
	}
	s.ov.mu.RUnlock()
	if failed != nil {
		return nil, failed
	}
	if len(pending) == 0 {
		return nil, nil
	}

	raws := make([][]byte, len(pending))
	size := 0
	for i, e := range pending {
		raws[i] = e.raw
		size += len(e.raw)
	}
	start := time.Now()
	cutBack, err := s.wal.append(first, raws)
	took := time.Since(start)
	s.met.observeCommit(took, len(pending))
	if err != nil {
		if cutBack != nil || errors.Is(err, errSync) {
			s.walFailed = errors.Join(err, cutBack)
		}
		return nil, err
	}
	if took >= slowCommit {
		s.log.Warn("slow store commit", "took", took.Round(time.Millisecond),
			"write", s.wal.lastWrite.Round(time.Millisecond), "sync", s.wal.lastSync.Round(time.Millisecond),
			"writes", len(pending), "bytes", size)
	}
	s.ov.add(first, pending)
	if s.ov.bytes.Load() >= int64(s.opts.CheckpointBytes) {
		s.kickCheckpoint()
	}
	if len(s.wal.old) > 0 {
		if err := s.wal.removeThrough(s.ov.checkpointed()); err != nil {
			s.log.Warn("could not delete a checkpointed segment of the store log; it is tried again", "err", err)
		}
	}
	events := make([]store.Event, len(pending))
	for i, e := range pending {
		events[i] = e.rec.storeEvent(first + int64(i))
	}
	return events, nil
}

// waitForRoom holds the write loop while the overlay is full, until a
// checkpoint has moved its writes into the b-tree. A checkpoint that fails
// fails the writes that wait for it.
func (s *Store) waitForRoom() error {
	waited := false
	start := time.Now()
	for s.ov.bytes.Load() >= int64(s.opts.MaxPendingBytes) {
		if waited {
			if err := s.ckErr.Load(); err != nil {
				return fmt.Errorf("%d MiB of writes wait for a checkpoint that fails: %w", s.ov.bytes.Load()>>20, *err)
			}
		}
		waited = true
		s.kickCheckpoint()
		select {
		case <-s.ckDone:
		case <-s.stopWriter:
			return store.ErrClosed
		}
	}
	if waited {
		s.log.Warn("store writes waited for a checkpoint", "took", time.Since(start).Round(time.Millisecond), "maxPendingBytes", s.opts.MaxPendingBytes)
	}
	return nil
}

// slowCommit is when a commit holds up the writes behind it long enough
// for clients to notice: a fleet's Lease renewals queue up behind it.
const slowCommit = 250 * time.Millisecond

// gcCycles reads the process's completed GC cycles.
func gcCycles() uint64 {
	sample := []rtmetrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	rtmetrics.Read(sample)
	if sample[0].Value.Kind() != rtmetrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}

// errLookup: the key's current state could not be read to check a
// precondition; it fails the whole batch.
var errLookup = errors.New("read the current object")

// check tests op's precondition against the key's newest state and
// returns the event it will log and, for a delete, the removed object.
func check(lookup func(string) (pendingKey, bool, error), op *writeOp) (eventRecord, store.KV, error) {
	cur, exists, err := lookup(op.key)
	if err != nil {
		return eventRecord{}, store.KV{}, fmt.Errorf("%w: %w", errLookup, err)
	}
	if op.kind == opCreate {
		if exists {
			return eventRecord{}, store.KV{}, store.ErrExists
		}
		return eventRecord{Type: store.EventPut, Created: true, Key: op.key, Value: op.value}, store.KV{}, nil
	}
	if !exists {
		return eventRecord{}, store.KV{}, store.ErrNotFound
	}
	if op.expectRev != 0 && op.expectRev != cur.modRev {
		return eventRecord{}, store.KV{}, fmt.Errorf("expected revision %d, object is at %d: %w", op.expectRev, cur.modRev, store.ErrConflict)
	}
	rec := eventRecord{Key: op.key, CreateRev: cur.createRev, PrevModRev: cur.modRev, PrevValue: cur.value}
	if op.kind == opDelete {
		rec.Type = store.EventDelete
		rec.Value = cur.value
		return rec, store.KV{Key: op.key, Value: cur.value, CreateRevision: cur.createRev, ModRevision: cur.modRev}, nil
	}
	rec.Type = store.EventPut
	rec.Value = op.value
	return rec, store.KV{}, nil
}
