package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"flotilla.dev/flotilla/hub/store"
)

var _ store.Store = (*Store)(nil)

var (
	objectsBucket = []byte("objects")
	eventsBucket  = []byte("events")
	metaBucket    = []byte("meta")

	metaRev       = []byte("revision")
	metaCompacted = []byte("compacted")
	metaFormat    = []byte("format")
)

// Defaults for the zero Options.
const (
	DefaultHistoryLimit  = 100_000
	DefaultWatchBuffer   = 4096
	DefaultLockTimeout   = 5 * time.Second
	DefaultMaxBatchOps   = 1000
	DefaultMaxBatchBytes = 16 << 20
	DefaultMaxBatchDelay = time.Millisecond
	// A checkpoint every 2 s writes a fleet's Leases (10,000 renewed every
	// 10 s) into the b-tree about once a page per checkpoint rather than
	// once a page per commit.
	DefaultCheckpointInterval = 2 * time.Second
	DefaultCheckpointBytes    = 16 << 20
	DefaultMaxPendingBytes    = 256 << 20
	DefaultLogSegmentBytes    = 64 << 20
	defaultMmapSize           = 1 << 30
	compactChunk              = 10_000
	replayChunk               = 512
	maxKeySize                = bolt.MaxKeySize
	autoCompactSlackDenom     = 10
)

// Options tune a Store; the zero value is the production default.
type Options struct {
	// HistoryLimit is how many events the log keeps for watches and past
	// lists; older ones are compacted in the background. 0 means
	// DefaultHistoryLimit, a negative value keeps everything (compaction
	// then happens only through Compact).
	HistoryLimit int64
	// WatchBuffer is how many undelivered events a watcher may have before
	// it is ended with ErrWatcherTooSlow. 0 means DefaultWatchBuffer.
	WatchBuffer int
	// MaxBatchOps and MaxBatchBytes bound how many writes, and how many
	// bytes of values, share one commit. 0 means the defaults.
	MaxBatchOps   int
	MaxBatchBytes int
	// MaxBatchDelay is how long a commit may wait for writers that are
	// about to come back, or for more writes when writes queued up during
	// the last commit (see writeLoop). 0 means DefaultMaxBatchDelay, a
	// negative value never waits.
	MaxBatchDelay time.Duration
	// LockTimeout is how long Open waits for another process to release
	// the file. 0 means DefaultLockTimeout.
	LockTimeout time.Duration
	// CheckpointInterval is how often the writes in the log are moved
	// into the b-tree; CheckpointBytes starts a checkpoint sooner when the
	// writes waiting for one hold that much. Writers wait for a checkpoint
	// only when those writes hold MaxPendingBytes. 0 means the defaults.
	CheckpointInterval time.Duration
	CheckpointBytes    int
	MaxPendingBytes    int
	// LogSegmentBytes is the size after which the log moves on to a new
	// file, so that the files a checkpoint has caught up with can be
	// deleted. 0 means DefaultLogSegmentBytes.
	LogSegmentBytes int64
	// Registerer receives the store's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger for compaction and watch events; nil means slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.HistoryLimit == 0 {
		o.HistoryLimit = DefaultHistoryLimit
	}
	if o.WatchBuffer <= 0 {
		o.WatchBuffer = DefaultWatchBuffer
	}
	if o.MaxBatchOps <= 0 {
		o.MaxBatchOps = DefaultMaxBatchOps
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.MaxBatchDelay == 0 {
		o.MaxBatchDelay = DefaultMaxBatchDelay
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = DefaultCheckpointInterval
	}
	if o.CheckpointBytes <= 0 {
		o.CheckpointBytes = DefaultCheckpointBytes
	}
	if o.MaxPendingBytes <= 0 {
		o.MaxPendingBytes = DefaultMaxPendingBytes
	}
	if o.LogSegmentBytes <= 0 {
		o.LogSegmentBytes = DefaultLogSegmentBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Store is the bbolt-backed store.Store: one file holding the objects, the
// event log and the revision counters, and a write-ahead log of the writes
// not yet checkpointed into it.
type Store struct {
	path string
	db   *bolt.DB
	wal  *wal
	ov   *overlay
	// walFailed, set by the write loop only, stops writing after the log
	// could not be synced: what it holds can no longer be trusted.
	walFailed error
	opts      Options
	log       *slog.Logger
	met       *metrics

	// mu guards closed; writers hold it shared while they enqueue so that
	// Close can wait for every accepted write.
	mu       sync.RWMutex
	closed   bool
	inflight sync.WaitGroup

	ops        chan *writeOp
	stopWriter chan struct{}
	writerDone chan struct{}

	// closing ends watchers and the compactor.
	closing   chan struct{}
	closeOnce sync.Once
	bgDone    sync.WaitGroup

	hub *watchHub

	// compacted mirrors the meta bucket for metrics, watches and deciding
	// when to compact; the bucket stays the source of truth. The current
	// revision is the overlay's.
	compacted   atomic.Int64
	compactKick chan struct{}
	compactMu   sync.Mutex

	ckMu   sync.Mutex // one checkpoint at a time
	ckKick chan struct{}
	ckDone chan struct{} // a checkpoint ended, for writers waiting for room
	ckErr  atomic.Pointer[error]
	// slowCheckpointAfter is slowCheckpoint; tests shorten it.
	slowCheckpointAfter time.Duration
}

// Open opens (creating if needed) the store file at path. The directory
// must exist. The file is locked: a second Open of the same file, even from
// another process, fails after Options.LockTimeout.
func Open(path string, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout: opts.LockTimeout,
		// Safe: the freelist is rebuilt from the pages after a crash; not
		// writing it makes every commit cheaper.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		// A mapping larger than the file lets the file grow without
		// remapping, which would wait for every open read transaction.
		InitialMmapSize: defaultMmapSize,
	})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("open store %s: file is locked by another process (is another hub using this data dir?): %w", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s := &Store{
		path:        path,
		db:          db,
		opts:        opts,
		log:         opts.Logger.With("store", path),
		ops:         make(chan *writeOp, opts.MaxBatchOps),
		stopWriter:  make(chan struct{}),
		writerDone:  make(chan struct{}),
		closing:     make(chan struct{}),
		compactKick: make(chan struct{}, 1),
		ckKick:      make(chan struct{}, 1),
		ckDone:      make(chan struct{}, 1),

		slowCheckpointAfter: slowCheckpoint,
	}
	var rev, compacted int64
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{objectsBucket, eventsBucket, metaBucket} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("bucket %s: %w", name, err)
			}
		}
		meta := tx.Bucket(metaBucket)
		switch f := meta.Get(metaFormat); {
		case len(f) == 1 && f[0] == fileFormat:
		case f == nil || (len(f) == 1 && f[0] == formatPlain):
			// New, or written before records were compressed: its plain
			// records stay readable, and from now on it may hold
			// compressed ones, which a hub that knows only plain ones
			// must refuse.
			if err := meta.Put(metaFormat, []byte{fileFormat}); err != nil {
				return err
			}
		default:
			return fmt.Errorf("file format %v is not one this hub reads (%d or older): written by a newer hub; run that version, or restore the data dir from a backup this version wrote", f, fileFormat)
		}
		rev = decodeRev(meta.Get(metaRev))
		compacted = decodeRev(meta.Get(metaCompacted))
		return nil
	})
	if err == nil {
		rev, err = s.recoverLog(walDirFor(path), rev)
	}
	if err == nil {
		s.wal, err = openWAL(walDirFor(path), rev, opts.LogSegmentBytes)
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s.ov = newOverlay(rev)
	s.compacted.Store(compacted)
	s.hub = newWatchHub(rev, opts.WatchBuffer)
	if opts.Registerer != nil {
		m, err := newMetrics(opts.Registerer, s)
		if err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("open store %s: register metrics: %w", path, err)
		}
		s.met = m
	}
	go s.writeLoop()
	s.bgDone.Add(2)
	go s.compactLoop()
	go s.checkpointLoop()
	// A compaction interrupted by a crash may have left events behind.
	s.kickCompactor()
	return s, nil
}

// Path is the file the store lives in.
func (s *Store) Path() string { return s.path }

// Close waits for accepted writes to commit, ends every watch, stops the
// compactor, checkpoints the log into the b-tree, deletes the log and
// closes the file. Closing twice is harmless.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.inflight.Wait()
	close(s.stopWriter)
	<-s.writerDone
	s.closeOnce.Do(func() { close(s.closing) })
	s.bgDone.Wait()
	s.met.unregister()
	// What the last checkpoint could not take stays in the log, and the
	// next Open recovers it.
	err := s.checkpoint()
	err = errors.Join(err, s.wal.close(s.ov.checkpointed()), s.db.Close())
	if err != nil {
		return fmt.Errorf("close store %s: %w", s.path, err)
	}
	return nil
}

// view runs fn in a read transaction unless the store is closed.
func (s *Store) view(fn func(tx *bolt.Tx) error) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return store.ErrClosed
	}
	// Counted as in flight so that Close does not close the file under it.
	s.inflight.Add(1)
	s.mu.RUnlock()
	defer s.inflight.Done()
	return s.db.View(fn)
}

func readMeta(tx *bolt.Tx) (rev, compacted int64) {
	meta := tx.Bucket(metaBucket)
	return decodeRev(meta.Get(metaRev)), decodeRev(meta.Get(metaCompacted))
}

// Get returns the current value of key.
func (s *Store) Get(ctx context.Context, key string) (store.KV, error) {
	if err := ctx.Err(); err != nil {
		return store.KV{}, fmt.Errorf("get %q: %w", key, err)
	}
	// A key not written since the checkpoint is in the b-tree at least as
	// new as the overlay was: a checkpoint commits before it prunes.
	if p, ok := s.ov.get(key); ok {
		if p.deleted {
			return store.KV{}, fmt.Errorf("get %q: %w", key, store.ErrNotFound)
		}
		return store.KV{Key: key, Value: clone(p.value), CreateRevision: p.createRev, ModRevision: p.modRev}, nil
	}
	var kv store.KV
	err := s.view(func(tx *bolt.Tx) error {
		raw := tx.Bucket(objectsBucket).Get([]byte(key))
		if raw == nil {
			return store.ErrNotFound
		}
		c, m, v, err := decodeObject(raw)
		if err != nil {
			return err
		}
		kv = store.KV{Key: key, Value: clone(v), CreateRevision: c, ModRevision: m}
		return nil
	})
	if err != nil {
		return store.KV{}, fmt.Errorf("get %q: %w", key, err)
	}
	return kv, nil
}

// List returns the keys under prefix as of rev (0: latest). The current
// objects are the b-tree's with the overlay's pending writes on top; a past
// revision is served by undoing, newest first, the events after rev (the
// overlay's, then the b-tree's), so any revision back to the compacted one
// works.
func (s *Store) List(ctx context.Context, prefix string, rev int64) ([]store.KV, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("list %q: %w", prefix, err)
	}
	if rev < 0 {
		return nil, 0, fmt.Errorf("list %q at revision %d: a revision is 0 (latest) or positive", prefix, rev)
	}
	for {
		out, at, err := s.list(prefix, rev)
		if errors.Is(err, errTreeAhead) {
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("list %q: %w", prefix, err)
		}
		return out, at, nil
	}
}

// errTreeAhead: a checkpoint committed writes newer than the overlay a
// reader had copied before its read transaction began; it copies again.
var errTreeAhead = errors.New("b-tree ahead of the overlay copied")

func (s *Store) list(prefix string, rev int64) ([]store.KV, int64, error) {
	current, base, events, pend := s.ov.snapshot(prefix, true)
	if rev > current {
		return nil, 0, fmt.Errorf("revision %d, current is %d: %w", rev, current, store.ErrFutureRevision)
	}
	var out []store.KV
	err := s.view(func(tx *bolt.Tx) error {
		tree, compacted := readMeta(tx)
		switch {
		case tree > current:
			return errTreeAhead
		case rev != 0 && rev < compacted:
			return fmt.Errorf("revision %d, oldest kept is %d: %w", rev, compacted, store.ErrCompacted)
		}
		var err error
		out, err = listCurrent(tx, prefix, pend)
		if err != nil || rev == 0 || rev == current {
			return err
		}
		out, err = rollBack(tx, prefix, out, rev, current, base, events)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	if rev == 0 {
		rev = current
	}
	return out, rev, nil
}

// listCurrent lists the b-tree's objects under prefix with pend, the
// overlay's newer state of keys under it, on top.
func listCurrent(tx *bolt.Tx, prefix string, pend map[string]pendingKey) ([]store.KV, error) {
	var out []store.KV
	p := []byte(prefix)
	c := tx.Bucket(objectsBucket).Cursor()
	for k, raw := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, raw = c.Next() {
		if _, ok := pend[string(k)]; ok {
			continue
		}
		cr, m, v, err := decodeObject(raw)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", k, err)
		}
		out = append(out, store.KV{Key: string(k), Value: clone(v), CreateRevision: cr, ModRevision: m})
	}
	if len(pend) == 0 {
		return out, nil
	}
	for k, p := range pend {
		if !p.deleted {
			out = append(out, store.KV{Key: k, Value: clone(p.value), CreateRevision: p.createRev, ModRevision: p.modRev})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// rollBack turns the objects listed at current into the objects at rev by
// undoing the events in (rev, current], newest first: those after base
// from the overlay's events, the rest from the b-tree's.
func rollBack(tx *bolt.Tx, prefix string, kvs []store.KV, rev, current, base int64, events []pendingEvent) ([]store.KV, error) {
	state := make(map[string]store.KV, len(kvs))
	for _, kv := range kvs {
		state[kv.Key] = kv
	}
	undo := func(e eventRecord) {
		if e.Type == store.EventPut && e.Created {
			delete(state, e.Key)
			return
		}
		state[e.Key] = store.KV{Key: e.Key, Value: e.PrevValue, CreateRevision: e.CreateRev, ModRevision: e.PrevModRev}
	}
	want := current
	for ; want > base && want > rev; want-- {
		if e := events[want-base-1].rec; strings.HasPrefix(e.Key, prefix) {
			undo(e)
		}
	}
	p := []byte(prefix)
	c := tx.Bucket(eventsBucket).Cursor()
	for k, raw := c.Seek(encodeRev(want)); k != nil && want > rev; k, raw = c.Prev() {
		if r := decodeRev(k); r != want {
			return nil, fmt.Errorf("event log has revision %d where %d was expected: %w", r, want, errCorrupt)
		}
		want--
		key, err := eventKey(raw)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", decodeRev(k), err)
		}
		if !bytes.HasPrefix(key, p) {
			continue
		}
		e, err := decodeEvent(raw)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", decodeRev(k), err)
		}
		undo(e)
	}
	if want != rev {
		return nil, fmt.Errorf("event log ends at revision %d, needed down to %d: %w", want+1, rev+1, store.ErrCompacted)
	}
	out := make([]store.KV, 0, len(state))
	for _, kv := range state {
		out = append(out, kv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Revision returns the current and the compacted revision.
func (s *Store) Revision(ctx context.Context) (current, compacted int64, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, fmt.Errorf("revision: %w", err)
	}
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return 0, 0, fmt.Errorf("revision: %w", store.ErrClosed)
	}
	return s.ov.current(), s.compacted.Load(), nil
}
