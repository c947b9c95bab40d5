package boltstore

import (
	"context"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"flotilla.dev/flotilla/hub/store"
)

// Compact drops the logged events at and before rev. Watches and past
// lists can then start no earlier than rev. Compacting to a revision at or
// before the current compacted one does nothing.
func (s *Store) Compact(ctx context.Context, rev int64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("compact to %d: %w", rev, err)
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return fmt.Errorf("compact to %d: %w", rev, store.ErrClosed)
	}
	s.inflight.Add(1)
	s.mu.RUnlock()
	defer s.inflight.Done()
	if err := s.compact(ctx, rev); err != nil {
		return fmt.Errorf("compact to %d: %w", rev, err)
	}
	return nil
}

// compact first records the new compacted revision, so that readers refuse
// older revisions from then on, and then deletes the events in chunks, each
// its own transaction, so that writers are never held up by one long
// commit. Deleting always starts at the oldest event, so chunks left over by
// a crash or a cancelled context are deleted by the next compaction.
func (s *Store) compact(ctx context.Context, rev int64) error {
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	if current := s.ov.current(); rev > current {
		return fmt.Errorf("current revision is %d: %w", current, store.ErrFutureRevision)
	}
	// Compaction deletes events from the b-tree; those it should delete
	// must be there first.
	if rev > s.ov.checkpointed() {
		if err := s.checkpoint(); err != nil {
			return err
		}
	}
	var compacted int64
	if err := s.db.View(func(tx *bolt.Tx) error {
		_, compacted = readMeta(tx)
		return nil
	}); err != nil {
		return err
	}
	if rev > compacted {
		// compactMu makes this the only writer of the compacted revision.
		if err := s.db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(metaBucket).Put(metaCompacted, encodeRev(rev))
		}); err != nil {
			return err
		}
		compacted = rev
		s.compacted.Store(rev)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := s.purgeChunk(compacted)
		if err != nil {
			return err
		}
		if n < compactChunk {
			return nil
		}
	}
}

// purgeChunk deletes up to compactChunk events at or before rev. It
// commits only when it deleted something: an empty commit would still cost
// a sync.
func (s *Store) purgeChunk(rev int64) (int, error) {
	start := time.Now()
	tx, err := s.db.Begin(true)
	if err != nil {
		return 0, err
	}
	b := tx.Bucket(eventsBucket)
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.First(); k != nil && decodeRev(k) <= rev && len(keys) < compactChunk; k, _ = c.Next() {
		keys = append(keys, clone(k))
	}
	if len(keys) == 0 {
		return 0, tx.Rollback()
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			_ = tx.Rollback()
			return 0, fmt.Errorf("delete event %d: %w", decodeRev(k), err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	// Writes wait for the whole of it: the chunk holds the write lock.
	if took := time.Since(start); took >= slowCommit {
		s.log.Warn("slow compaction chunk", "took", took.Round(time.Millisecond), "events", len(keys))
	}
	return len(keys), nil
}

// maybeAutoCompact wakes the compactor once the log holds a tenth more
// than HistoryLimit events, so that compactions come in chunks rather than
// after every write.
func (s *Store) maybeAutoCompact(rev int64) {
	limit := s.opts.HistoryLimit
	if limit < 0 {
		return
	}
	if rev-s.compacted.Load() > limit+max(limit/autoCompactSlackDenom, 1) {
		s.kickCompactor()
	}
}

func (s *Store) kickCompactor() {
	select {
	case s.compactKick <- struct{}{}:
	default:
	}
}

// compactLoop runs the automatic compactions off the write path.
func (s *Store) compactLoop() {
	defer s.bgDone.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.closing
		cancel()
	}()
	for {
		select {
		case <-s.compactKick:
		case <-s.closing:
			return
		}
		target := s.compacted.Load()
		if s.opts.HistoryLimit >= 0 {
			target = max(target, s.ov.current()-s.opts.HistoryLimit)
		}
		if err := s.compact(ctx, target); err != nil && ctx.Err() == nil {
			s.log.Error("automatic compaction failed", "to", target, "err", err)
			continue
		}
		s.log.Debug("compacted event log", "to", target)
	}
}
