package boltstore

import (
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"

	"flotilla.dev/flotilla/hub/store"
)

// slowCheckpoint is when a checkpoint is worth a warning: writers do not
// wait for it, but the log and the overlay grow meanwhile.
const slowCheckpoint = 2 * time.Second

// recoverChunk bounds the writes recovery applies to the b-tree in one
// transaction.
const recoverChunk = 10_000

// checkpointLoop moves the log's writes into the b-tree: every
// CheckpointInterval, and sooner when the overlay holds CheckpointBytes.
// Writers never wait for it unless the overlay reaches MaxPendingBytes.
func (s *Store) checkpointLoop() {
	defer s.bgDone.Done()
	tick := time.NewTicker(s.opts.CheckpointInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-s.ckKick:
		case <-s.closing:
			return
		}
		if err := s.checkpoint(); err != nil {
			s.log.Error("store checkpoint failed; writes stay in the log and are tried again", "err", err)
		}
	}
}

func (s *Store) kickCheckpoint() {
	select {
	case s.ckKick <- struct{}{}:
	default:
	}
}

// checkpoint writes every event the overlay holds into the b-tree in one
// transaction (objects, events, revision), then forgets them from the
// overlay and lets the log drop them.
func (s *Store) checkpoint() error {
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	err := s.checkpointLocked()
	if err != nil {
		s.ckErr.Store(&err)
	} else {
		s.ckErr.Store(nil)
	}
	select {
	case s.ckDone <- struct{}{}:
	default:
	}
	return err
}

func (s *Store) checkpointLocked() error {
	rev, base, events, _ := s.ov.snapshot("", false)
	if rev == base {
		return nil
	}
	began := time.Now()
	tx, err := s.db.Begin(true)
	locked := time.Since(began)
	if err != nil {
		return fmt.Errorf("checkpoint: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	objs, evs := tx.Bucket(objectsBucket), tx.Bucket(eventsBucket)
	// Events are appended in revision order; full pages waste no space.
	evs.FillPercent = 1.0
	for i, e := range events[:rev-base] {
		if err := applyToTree(objs, evs, base+1+int64(i), e.rec, e.raw); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err := tx.Bucket(metaBucket).Put(metaRev, encodeRev(rev)); err != nil {
		return fmt.Errorf("checkpoint: store revision: %w", err)
	}
	gcs := gcCycles()
	start := time.Now()
	err = tx.Commit()
	committed = true
	took := time.Since(start)
	s.met.observeCheckpoint(took)
	if err != nil {
		return fmt.Errorf("checkpoint through revision %d: %w", rev, err)
	}
	if took >= s.slowCheckpointAfter || locked >= s.slowCheckpointAfter {
		s.reportSlowCheckpoint(tx, int(rev-base), locked, took, gcCycles()-gcs)
	}
	s.ov.prune(rev)
	return nil
}

// applyToTree writes one logged event into the b-tree: the key's object
// and the event.
func applyToTree(objs, evs *bolt.Bucket, rev int64, rec eventRecord, raw []byte) error {
	key := []byte(rec.Key)
	var err error
	if rec.Type == store.EventDelete {
		err = objs.Delete(key)
	} else {
		err = objs.Put(key, encodeObject(rec.CreateRev, rev, rec.Value))
	}
	if err == nil {
		err = evs.Put(encodeRev(rev), raw)
	}
	if err != nil {
		return fmt.Errorf("revision %d, %q: %w", rev, rec.Key, err)
	}
	return nil
}

// reportSlowCheckpoint says where a slow checkpoint spent its time, in
// bbolt's phases: waiting for the write lock (a compaction chunk holds
// it), rebalancing after deletes, spilling nodes onto pages (which may
// remap a grown file, waiting for every open read transaction), and
// writing the pages and syncing them; "other" is the file growing.
// Garbage collection cycles that ran meanwhile point at the process
// instead of the disk.
func (s *Store) reportSlowCheckpoint(tx *bolt.Tx, writes int, locked, took time.Duration, gcs uint64) {
	st := tx.Stats()
	phases := st.GetRebalanceTime() + st.GetSpillTime() + st.GetWriteTime()
	s.log.Warn("slow store checkpoint",
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

// recoverLog applies to the b-tree what the log holds past its revision
// rev — the writes acknowledged after the last checkpoint before the hub
// stopped — and deletes the log. It returns the revision the store is at.
func (s *Store) recoverLog(dir string, rev int64) (int64, error) {
	var pending []walEvent
	segments, torn, err := readWAL(dir, rev, func(e walEvent) error {
		pending = append(pending, e)
		return nil
	})
	if err != nil {
		if errors.Is(err, errLogDamaged) {
			return 0, fmt.Errorf("%w: the store file is at revision %d and the log cannot say which writes after it were acknowledged; "+
				"move %s away to start from revision %d (writes acknowledged after it are lost) or restore the data dir from a backup", err, rev, dir, rev)
		}
		return 0, err
	}
	if torn > 0 {
		s.log.Warn("store log ends in a write cut short by a crash, never acknowledged; dropped", "bytes", torn)
	}
	for len(pending) > 0 {
		chunk := pending[:min(len(pending), recoverChunk)]
		pending = pending[len(chunk):]
		err := s.db.Update(func(tx *bolt.Tx) error {
			objs, evs := tx.Bucket(objectsBucket), tx.Bucket(eventsBucket)
			evs.FillPercent = 1.0
			for _, e := range chunk {
				rec, err := decodeEvent(e.raw)
				if err != nil {
					return fmt.Errorf("store log, revision %d: %w", e.rev, err)
				}
				if err := applyToTree(objs, evs, e.rev, rec, e.raw); err != nil {
					return err
				}
			}
			return tx.Bucket(metaBucket).Put(metaRev, encodeRev(chunk[len(chunk)-1].rev))
		})
		if err != nil {
			return 0, fmt.Errorf("recover from the store log: %w", err)
		}
		s.log.Info("recovered writes from the store log", "writes", len(chunk), "through", chunk[len(chunk)-1].rev)
		rev = chunk[len(chunk)-1].rev
	}
	for _, seg := range segments {
		if err := os.Remove(seg); err != nil {
			return 0, fmt.Errorf("store log: %w", err)
		}
	}
	return rev, nil
}
