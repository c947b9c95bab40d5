package store

import (
	"context"
	"errors"
)

// Errors every implementation returns, wrapped, so callers can use errors.Is.
var (
	// ErrNotFound: no object at the key (or not at the requested revision).
	ErrNotFound = errors.New("not found")
	// ErrExists: Create found an object already at the key.
	ErrExists = errors.New("already exists")
	// ErrConflict: the object's revision is not the one the write expected.
	ErrConflict = errors.New("revision conflict")
	// ErrCompacted: the requested revision is older than the history kept.
	ErrCompacted = errors.New("revision compacted")
	// ErrFutureRevision: the requested revision has not been written yet.
	ErrFutureRevision = errors.New("revision not yet written")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store closed")
	// ErrWatcherTooSlow ends a watch whose consumer did not keep up.
	ErrWatcherTooSlow = errors.New("watcher too slow")
)

// KV is one stored object at one revision.
type KV struct {
	Key   string
	Value []byte
	// ModRevision is the revision of the last write to the key (the object's
	// resourceVersion); CreateRevision the revision that created it.
	ModRevision    int64
	CreateRevision int64
}

// EventType says what happened to a key.
type EventType int

const (
	EventPut EventType = iota + 1
	EventDelete
)

func (t EventType) String() string {
	switch t {
	case EventPut:
		return "PUT"
	case EventDelete:
		return "DELETE"
	}
	return "UNKNOWN"
}

// Event is one change, in revision order. For a delete, KV.Value is the
// value the key had before, and KV.ModRevision the revision of the delete.
type Event struct {
	Type EventType
	KV   KV
	// PrevValue is the value before this change (nil for a creation).
	PrevValue []byte
	// Created is true when a put created the key.
	Created bool
}

// WatchResult is what a watch delivers: events, or the error that ended it
// (after which the channel is closed).
type WatchResult struct {
	Events []Event
	Err    error
}

// Store is a revisioned key-value store. One global revision counts every
// write; each write increments it in the same transaction that stores the
// value, and every acknowledged write is durable.
type Store interface {
	// Get returns the current value of key, or ErrNotFound.
	Get(ctx context.Context, key string) (KV, error)
	// List returns every key with the prefix, in key order, as of revision
	// rev (0: latest), and the revision the list is consistent at.
	// A rev older than the compacted revision is ErrCompacted.
	List(ctx context.Context, prefix string, rev int64) ([]KV, int64, error)
	// Create stores value at key if no object is there (ErrExists otherwise)
	// and returns the new revision.
	Create(ctx context.Context, key string, value []byte) (int64, error)
	// Update replaces the value at key if its ModRevision is expectRev
	// (ErrConflict otherwise; ErrNotFound if absent) and returns the new
	// revision. expectRev 0 means unconditional.
	Update(ctx context.Context, key string, value []byte, expectRev int64) (int64, error)
	// Delete removes key if its ModRevision is expectRev (0: unconditional)
	// and returns the deleted object and the revision of the delete.
	Delete(ctx context.Context, key string, expectRev int64) (KV, int64, error)
	// Watch delivers every change to keys with the prefix after revision
	// fromRev, in order, until ctx ends or the watch fails (the last
	// WatchResult carries the error; then the channel is closed). fromRev
	// older than the history kept is ErrCompacted. A consumer that falls
	// behind by more than the implementation's buffer gets ErrWatcherTooSlow
	// rather than growing memory.
	Watch(ctx context.Context, prefix string, fromRev int64) (<-chan WatchResult, error)
	// Revision returns the current revision and the oldest revision that
	// watches can still start from.
	Revision(ctx context.Context) (current, compacted int64, err error)
	// Compact drops history at and before rev.
	Compact(ctx context.Context, rev int64) error
	// Close releases the store; pending writes finish first.
	Close() error
}
