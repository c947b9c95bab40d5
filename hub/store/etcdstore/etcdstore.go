package etcdstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"flotilla.dev/flotilla/hub/store"
)

var _ store.Store = (*Store)(nil)

// Defaults for the zero Config.
const (
	DefaultPrefix      = "/flotilla"
	DefaultWatchBuffer = 4096
	DefaultDialTimeout = 5 * time.Second
	// listPage bounds one range request: a list of a large collection is
	// read in pages at one revision rather than as one huge response.
	listPage = 1000
)

// Config says which etcd to use and how.
type Config struct {
	// Endpoints of the etcd cluster ("https://10.0.0.1:2379", ...).
	Endpoints []string
	// TLS for the client connection; nil talks plain HTTP.
	TLS *tls.Config
	// Username and Password, when etcd has authentication on.
	Username, Password string
	// Prefix every key is stored under; DefaultPrefix when empty.
	Prefix string
	// WatchBuffer is how many undelivered events a watcher may have before
	// it is ended with ErrWatcherTooSlow; DefaultWatchBuffer when 0.
	WatchBuffer int
	// DialTimeout bounds connecting; DefaultDialTimeout when 0.
	DialTimeout time.Duration
}

// Store is store.Store on etcd.
type Store struct {
	client *clientv3.Client
	prefix string
	buffer int

	// compacted caches the last compacted revision seen; it only grows.
	compacted atomic.Int64

	mu      sync.Mutex
	closed  bool
	ops     sync.WaitGroup
	cancel  context.CancelFunc
	baseCtx context.Context
}

// New connects to etcd and checks that it answers.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcdstore: no etcd endpoints: give at least one URL (--etcd-endpoints)")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if !strings.HasPrefix(cfg.Prefix, "/") || strings.HasSuffix(cfg.Prefix, "/") {
		return nil, fmt.Errorf("etcdstore: prefix %q must start with / and not end with one", cfg.Prefix)
	}
	if cfg.WatchBuffer <= 0 {
		cfg.WatchBuffer = DefaultWatchBuffer
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		TLS:         cfg.TLS,
		Username:    cfg.Username,
		Password:    cfg.Password,
		DialTimeout: cfg.DialTimeout,
		Context:     context.WithoutCancel(ctx),
		Logger:      zap.NewNop(),
		// A partitioned member must not answer reads: every read is
		// linearizable anyway, but the client should also leave it.
		RejectOldCluster: true,
	})
	if err != nil {
		return nil, fmt.Errorf("etcdstore: etcd at %v does not answer within %v (check --etcd-endpoints and the etcd TLS flags): %w", cfg.Endpoints, cfg.DialTimeout, err)
	}
	s := &Store{client: client, prefix: cfg.Prefix, buffer: cfg.WatchBuffer}
	s.baseCtx, s.cancel = context.WithCancel(context.Background())
	cctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if _, err := client.Get(cctx, s.prefix+"/", clientv3.WithCountOnly()); err != nil {
		client.Close()
		return nil, fmt.Errorf("etcdstore: etcd at %v does not answer (check --etcd-endpoints and the etcd TLS flags): %w", cfg.Endpoints, mapErr(err))
	}
	return s, nil
}

// begin counts an operation so that Close waits for it.
func (s *Store) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	s.ops.Add(1)
	return nil
}

func (s *Store) key(k string) string { return s.prefix + k }

func (s *Store) kv(kv *mvccpb.KeyValue) store.KV {
	return store.KV{Key: strings.TrimPrefix(string(kv.Key), s.prefix), Value: kv.Value, ModRevision: kv.ModRevision, CreateRevision: kv.CreateRevision}
}

// mapErr turns etcd's errors into the store's.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("%w: %v", store.ErrCompacted, err)
	case errors.Is(err, rpctypes.ErrFutureRev):
		return fmt.Errorf("%w: %v", store.ErrFutureRevision, err)
	}
	return err
}

func checkKey(key string) error {
	if !strings.HasPrefix(key, "/") {
		return fmt.Errorf("etcdstore: key %q must start with /", key)
	}
	return nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, key string) (store.KV, error) {
	if err := s.begin(); err != nil {
		return store.KV{}, err
	}
	defer s.ops.Done()
	resp, err := s.client.Get(ctx, s.key(key))
	if err != nil {
		return store.KV{}, fmt.Errorf("get %s: %w", key, mapErr(err))
	}
	if len(resp.Kvs) == 0 {
		return store.KV{}, fmt.Errorf("%s: %w", key, store.ErrNotFound)
	}
	return s.kv(resp.Kvs[0]), nil
}

// List implements store.Store: pages of listPage keys, all read at one
// revision, so the list is consistent however long it is.
func (s *Store) List(ctx context.Context, prefix string, rev int64) ([]store.KV, int64, error) {
	if err := s.begin(); err != nil {
		return nil, 0, err
	}
	defer s.ops.Done()
	if rev > 0 {
		if comp, err := s.compactedRev(ctx); err != nil {
			return nil, 0, err
		} else if rev < comp {
			return nil, 0, fmt.Errorf("list %s at %d: %w (history kept from %d)", prefix, rev, store.ErrCompacted, comp)
		}
	}
	start, end := s.key(prefix), clientv3.GetPrefixRangeEnd(s.key(prefix))
	var out []store.KV
	at := rev
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(listPage)}
		if at > 0 {
			opts = append(opts, clientv3.WithRev(at))
		}
		resp, err := s.client.Get(ctx, start, opts...)
		if err != nil {
			return nil, 0, fmt.Errorf("list %s: %w", prefix, mapErr(err))
		}
		if at == 0 {
			at = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			out = append(out, s.kv(kv))
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	return out, at, nil
}

// Create implements store.Store.
func (s *Store) Create(ctx context.Context, key string, value []byte) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	if err := s.begin(); err != nil {
		return 0, err
	}
	defer s.ops.Done()
	k := s.key(key)
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(value))).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", key, mapErr(err))
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("%s: %w", key, store.ErrExists)
	}
	return resp.Header.Revision, nil
}

// Update implements store.Store.
func (s *Store) Update(ctx context.Context, key string, value []byte, expectRev int64) (int64, error) {
	if err := s.begin(); err != nil {
		return 0, err
	}
	defer s.ops.Done()
	k := s.key(key)
	cmp := clientv3.Compare(clientv3.ModRevision(k), "=", expectRev)
	if expectRev == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(k), ">", 0)
	}
	resp, err := s.client.Txn(ctx).If(cmp).
		Then(clientv3.OpPut(k, string(value))).
		Else(clientv3.OpGet(k, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("update %s: %w", key, mapErr(err))
	}
	if !resp.Succeeded {
		return 0, s.failed(key, resp, expectRev)
	}
	return resp.Header.Revision, nil
}

// failed says why a compare failed: the key is gone, or it moved on.
func (s *Store) failed(key string, resp *clientv3.TxnResponse, expectRev int64) error {
	if len(resp.Responses) == 0 || len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
		return fmt.Errorf("%s: %w", key, store.ErrNotFound)
	}
	cur := resp.Responses[0].GetResponseRange().Kvs[0].ModRevision
	return fmt.Errorf("%s is at revision %d, not %d: %w", key, cur, expectRev, store.ErrConflict)
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, key string, expectRev int64) (store.KV, int64, error) {
	if err := s.begin(); err != nil {
		return store.KV{}, 0, err
	}
	defer s.ops.Done()
	k := s.key(key)
	cmp := clientv3.Compare(clientv3.ModRevision(k), "=", expectRev)
	if expectRev == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(k), ">", 0)
	}
	resp, err := s.client.Txn(ctx).If(cmp).
		Then(clientv3.OpDelete(k, clientv3.WithPrevKV())).
		Else(clientv3.OpGet(k, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return store.KV{}, 0, fmt.Errorf("delete %s: %w", key, mapErr(err))
	}
	if !resp.Succeeded {
		return store.KV{}, 0, s.failed(key, resp, expectRev)
	}
	del := resp.Responses[0].GetResponseDeleteRange()
	if len(del.PrevKvs) == 0 {
		// Deleted between the compare and the delete cannot happen in one
		// transaction; a missing previous value means etcd lost it.
		return store.KV{}, 0, fmt.Errorf("delete %s: etcd returned no previous value", key)
	}
	return s.kv(del.PrevKvs[0]), resp.Header.Revision, nil
}

// Revision implements store.Store.
func (s *Store) Revision(ctx context.Context) (current, compacted int64, err error) {
	if err := s.begin(); err != nil {
		return 0, 0, err
	}
	defer s.ops.Done()
	resp, err := s.client.Get(ctx, s.prefix+"/", clientv3.WithCountOnly())
	if err != nil {
		return 0, 0, fmt.Errorf("revision: %w", mapErr(err))
	}
	comp, err := s.compactedRev(ctx)
	if err != nil {
		return 0, 0, err
	}
	return resp.Header.Revision, comp, nil
}

// compactedRev finds etcd's compacted revision: the oldest one still
// readable, or 0 when nothing was ever compacted. etcd does not report
// it, and recording it in a key would make compaction a write; a read at
// the cached value costs one request when it has not moved, and a binary
// search finds it when it has.
func (s *Store) compactedRev(ctx context.Context) (int64, error) {
	readable := func(rev int64) (bool, error) {
		_, err := s.client.Get(ctx, s.prefix+"/", clientv3.WithRev(rev), clientv3.WithCountOnly())
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, rpctypes.ErrCompacted):
			return false, nil
		case errors.Is(err, rpctypes.ErrFutureRev):
			return true, nil
		}
		return false, fmt.Errorf("compacted revision: %w", mapErr(err))
	}
	lo := max(s.compacted.Load(), 1)
	ok, err := readable(lo)
	if err != nil || ok {
		if lo == 1 {
			return 0, err
		}
		return lo, err
	}
	resp, err := s.client.Get(ctx, s.prefix+"/", clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("compacted revision: %w", mapErr(err))
	}
	hi := resp.Header.Revision // always readable
	for lo+1 < hi {
		mid := lo + (hi-lo)/2
		ok, err := readable(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	s.noteCompacted(hi)
	return hi, nil
}

func (s *Store) noteCompacted(rev int64) {
	for {
		cur := s.compacted.Load()
		if rev <= cur || s.compacted.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// Compact implements store.Store: history before rev goes, the state at
// rev stays (etcd's compaction), which is "at and before rev" for watches
// since a watch from rev starts after it.
func (s *Store) Compact(ctx context.Context, rev int64) error {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.ops.Done()
	cur, err := s.client.Get(ctx, s.prefix+"/", clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("compact: %w", mapErr(err))
	}
	if rev > cur.Header.Revision {
		return fmt.Errorf("compact to %d, past the current revision %d: %w", rev, cur.Header.Revision, store.ErrFutureRevision)
	}
	comp, err := s.compactedRev(ctx)
	if err != nil {
		return err
	}
	if rev <= comp || rev <= 1 {
		return nil
	}
	if _, err := s.client.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return fmt.Errorf("compact to %d: %w", rev, mapErr(err))
	}
	s.noteCompacted(rev)
	return nil
}

// Close implements store.Store: it waits for running operations, ends
// every watch and closes the client.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.ops.Wait()
	s.cancel()
	return s.client.Close()
}

// DefaultCompactionInterval is how often RunCompaction compacts, and so
// how much history etcd keeps: kube-apiserver's default.
const DefaultCompactionInterval = 5 * time.Minute

// RunCompaction compacts etcd every interval to the revision it had one
// interval before, until ctx ends, so that etcd's history (and its
// database) stays bounded while watches that fall less than one interval
// behind can still resume. Every hub on the etcd may run it: compacting
// to a revision already compacted is nothing. A failed compaction is
// logged and tried again at the next tick.
func (s *Store) RunCompaction(ctx context.Context, interval time.Duration, log func(msg string, args ...any)) error {
	if interval <= 0 {
		interval = DefaultCompactionInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var last int64
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cur, _, err := s.Revision(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log("reading etcd's revision for compaction", "err", err)
			continue
		}
		if last > 0 {
			if err := s.Compact(ctx, last); err != nil && ctx.Err() == nil {
				log("compacting etcd", "revision", last, "err", err)
			}
		}
		last = cur
	}
}
