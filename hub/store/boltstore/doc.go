// Package boltstore owns the embedded implementation of store.Store: one
// bbolt file (the hub's DATA_DIR/state.db) with three buckets, and a
// write-ahead log beside it (DATA_DIR/state.wal/).
//
//   - objects: key → create revision, mod revision, value.
//   - events: revision (8 bytes, big endian) → type, key, value, previous
//     value and previous mod revision: the change log that watches resume
//     from and that List rolls back to serve past revisions.
//   - meta: the revision the file holds every write through, the
//     compacted revision, and the file format.
//
// Records of more than a few dozen bytes hold their values compressed
// (zstd, one frame for an event's two versions): a fleet's JSON repeats
// its field names in every object and an update repeats the object, and
// bbolt maps the whole file into the hub's memory. Records written before
// (file format 1) are read as they are.
//
// One goroutine owns writing: concurrent writers queue and share commits
// (group commit), so throughput grows with concurrency while each writer
// still gets its own result (a failed precondition fails only that
// write). A commit is one record appended to the log and one fsync;
// a write is acknowledged only after that, so it survives kill -9 and
// power loss. The writes are then visible through an in-memory overlay
// (the newest state of every key written, and the events in order) until
// a checkpoint, every Options.CheckpointInterval, writes them into the
// b-tree in one transaction and the overlay forgets them; log segments
// the b-tree has caught up with are deleted. So a write costs two system
// calls however many b-tree pages it dirties, and a page rewritten by
// many writes between checkpoints (a fleet's Leases) is written once.
// Open replays the log past the file's revision; a record cut short at
// the log's end (a crash during its append, never acknowledged) is
// dropped, any other damage refuses to open rather than guess.
//
// Readers copy what they need from the overlay under its read lock, then
// read the b-tree: a checkpoint commits before it prunes, so a key the
// overlay does not have is in the b-tree at least as new, and a List that
// finds the b-tree ahead of the overlay it copied copies again.
//
// Watches replay the event log (the b-tree's in short read transactions,
// then the overlay's), then switch to live delivery under the same lock
// the writer publishes under, so no event is lost or repeated at the
// switch. Publishing never blocks the writer: each live watcher has a
// bounded queue (Options.WatchBuffer) and one that overflows it is ended
// with store.ErrWatcherTooSlow. Events handed to watchers share their
// value slices; consumers must not modify them.
//
// A background compactor keeps the event log to Options.HistoryLimit
// events. Metrics (commit latency and batch size, checkpoint latency,
// bytes waiting for a checkpoint, revision, compacted revision, watchers)
// are registered with Options.Registerer when one is given.
package boltstore
