// Package boltstore owns the embedded implementation of store.Store: one
// bbolt file (the hub's DATA_DIR/state.db) with three buckets.
//
//   - objects: key → create revision, mod revision, value.
//   - events: revision (8 bytes, big endian) → type, key, value, previous
//     value and previous mod revision: the change log that watches resume
//     from and that List rolls back to serve past revisions.
//   - meta: the current and the compacted revision, and the file format.
//
// Every write increments the revision in the same transaction that stores
// the object and its event, and is acknowledged only after bbolt's commit
// has synced the file, so an acknowledged write survives kill -9 and power
// loss. One goroutine owns the write transaction: concurrent writers queue
// and share commits (group commit), so throughput grows with concurrency
// while each writer still gets its own result (a failed precondition fails
// only that write).
//
// Watches replay the log in short read transactions, then switch to live
// delivery under the same lock the writer publishes under, so no event is
// lost or repeated at the switch. Publishing never blocks the writer: each
// live watcher has a bounded queue (Options.WatchBuffer) and one that
// overflows it is ended with store.ErrWatcherTooSlow. Events handed to
// watchers share their value slices; consumers must not modify them.
//
// A background compactor keeps the log to Options.HistoryLimit events.
// Metrics (commit latency and batch size, revision, compacted revision,
// watchers) are registered with Options.Registerer when one is given.
package boltstore
