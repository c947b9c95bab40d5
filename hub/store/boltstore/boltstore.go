package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
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
	DefaultHistoryLimit   = 100_000
	DefaultWatchBuffer    = 4096
	DefaultLockTimeout    = 5 * time.Second
	DefaultMaxBatchOps    = 1000
	DefaultMaxBatchBytes  = 16 << 20
	DefaultMaxBatchDelay  = time.Millisecond
	defaultMmapSize       = 1 << 30
	compactChunk          = 10_000
	replayChunk           = 512
	maxKeySize            = bolt.MaxKeySize
	autoCompactSlackDenom = 10
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
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Store is the bbolt-backed store.Store: one file holding the objects, the
// event log and the revision counters.
type Store struct {
	path string
	db   *bolt.DB
	opts Options
	log  *slog.Logger
	met  *metrics

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

	// rev and compacted mirror the meta bucket for metrics and for deciding
	// when to compact; the bucket stays the source of truth.
	rev         atomic.Int64
	compacted   atomic.Int64
	compactKick chan struct{}
	compactMu   sync.Mutex
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
		case f == nil:
			if err := meta.Put(metaFormat, []byte{recordFormat}); err != nil {
				return err
			}
		case len(f) != 1 || f[0] != recordFormat:
			return fmt.Errorf("file format %v is not the supported %d (written by another version?)", f, recordFormat)
		}
		rev = decodeRev(meta.Get(metaRev))
		compacted = decodeRev(meta.Get(metaCompacted))
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s.rev.Store(rev)
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
	s.bgDone.Add(1)
	go s.compactLoop()
	// A compaction interrupted by a crash may have left events behind.
	s.kickCompactor()
	return s, nil
}

// Path is the file the store lives in.
func (s *Store) Path() string { return s.path }

// Close waits for accepted writes to commit, ends every watch, stops the
// compactor and closes the file. Closing twice is harmless.
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
	if err := s.db.Close(); err != nil {
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

// List returns the keys under prefix as of rev (0: latest). A past revision
// is served by reading the current objects and undoing, newest first, the
// logged events after rev; so any revision back to the compacted one works.
func (s *Store) List(ctx context.Context, prefix string, rev int64) ([]store.KV, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("list %q: %w", prefix, err)
	}
	if rev < 0 {
		return nil, 0, fmt.Errorf("list %q at revision %d: a revision is 0 (latest) or positive", prefix, rev)
	}
	var (
		out     []store.KV
		current int64
	)
	err := s.view(func(tx *bolt.Tx) error {
		var compacted int64
		current, compacted = readMeta(tx)
		switch {
		case rev > current:
			return fmt.Errorf("revision %d, current is %d: %w", rev, current, store.ErrFutureRevision)
		case rev != 0 && rev < compacted:
			return fmt.Errorf("revision %d, oldest kept is %d: %w", rev, compacted, store.ErrCompacted)
		}
		var err error
		out, err = listCurrent(tx, prefix)
		if err != nil || rev == 0 || rev == current {
			return err
		}
		out, err = rollBack(tx, prefix, out, rev, current)
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list %q: %w", prefix, err)
	}
	if rev == 0 {
		rev = current
	}
	return out, rev, nil
}

func listCurrent(tx *bolt.Tx, prefix string) ([]store.KV, error) {
	var out []store.KV
	p := []byte(prefix)
	c := tx.Bucket(objectsBucket).Cursor()
	for k, raw := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, raw = c.Next() {
		cr, m, v, err := decodeObject(raw)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", k, err)
		}
		out = append(out, store.KV{Key: string(k), Value: clone(v), CreateRevision: cr, ModRevision: m})
	}
	return out, nil
}

// rollBack turns the objects listed at current into the objects at rev by
// undoing the events in (rev, current], newest first.
func rollBack(tx *bolt.Tx, prefix string, kvs []store.KV, rev, current int64) ([]store.KV, error) {
	state := make(map[string]store.KV, len(kvs))
	for _, kv := range kvs {
		state[kv.Key] = kv
	}
	p := []byte(prefix)
	c := tx.Bucket(eventsBucket).Cursor()
	want := current
	for k, raw := c.Seek(encodeRev(current)); k != nil && decodeRev(k) > rev; k, raw = c.Prev() {
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
		if e.Type == store.EventPut && e.Created {
			delete(state, e.Key)
			continue
		}
		state[e.Key] = store.KV{Key: e.Key, Value: e.PrevValue, CreateRevision: e.CreateRev, ModRevision: e.PrevModRev}
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
	err = s.view(func(tx *bolt.Tx) error {
		current, compacted = readMeta(tx)
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("revision: %w", err)
	}
	return current, compacted, nil
}
