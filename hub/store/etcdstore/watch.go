package etcdstore

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"flotilla.dev/flotilla/hub/store"
)

// Watch implements store.Store on one etcd watch: events after fromRev
// (etcd's revision fromRev+1 on), with previous values, relayed through
// a buffer of Config.WatchBuffer events; a consumer that falls further
// behind is ended with ErrWatcherTooSlow instead of growing memory.
func (s *Store) Watch(ctx context.Context, prefix string, fromRev int64) (<-chan store.WatchResult, error) {
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.ops.Done()
	comp, err := s.compactedRev(ctx)
	if err != nil {
		return nil, err
	}
	if fromRev < comp {
		return nil, fmt.Errorf("watch %s from %d: %w (history kept from %d)", prefix, fromRev, store.ErrCompacted, comp)
	}
	cur, err := s.client.Get(ctx, s.prefix+"/", clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", prefix, mapErr(err))
	}
	if fromRev > cur.Header.Revision {
		return nil, fmt.Errorf("watch %s from %d, past the current revision %d: %w", prefix, fromRev, cur.Header.Revision, store.ErrFutureRevision)
	}
	// The etcd watch lives until ctx ends, the store closes, or the relay
	// ends it; the consumer gets what was relayed until ctx ends.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	stop := context.AfterFunc(s.baseCtx, cancel)
	wch := s.client.Watch(wctx, s.key(prefix), clientv3.WithPrefix(), clientv3.WithRev(fromRev+1), clientv3.WithPrevKV())
	out := make(chan store.WatchResult)
	w := &relay{s: s, out: out, in: make(chan store.WatchResult, s.buffer)}
	go w.pump(wctx, cancel, wch)
	go func() {
		defer stop()
		w.deliver(ctx)
	}()
	return out, nil
}

// relay moves events from etcd to the consumer: pump reads etcd and never
// blocks on the consumer; deliver hands results over in order.
type relay struct {
	s   *Store
	in  chan store.WatchResult
	out chan store.WatchResult
	// final is why the watch ended; pump sets it before closing in, and
	// deliver hands it over after everything in the buffer.
	final error
}

func (w *relay) pump(ctx context.Context, cancel context.CancelFunc, wch clientv3.WatchChan) {
	defer close(w.in)
	// fail ends the watch with err, delivered after the batches already
	// buffered, so the consumer sees every event up to a revision and
	// then why nothing follows.
	fail := func(err error) {
		w.final = err
		cancel()
	}
	for resp := range wch {
		if resp.CompactRevision > 0 {
			w.s.noteCompacted(resp.CompactRevision)
			fail(fmt.Errorf("watch: %w (history kept from %d)", store.ErrCompacted, resp.CompactRevision))
			return
		}
		if err := resp.Err(); err != nil {
			fail(fmt.Errorf("watch: %w", mapErr(err)))
			return
		}
		if len(resp.Events) == 0 {
			continue
		}
		evs := make([]store.Event, 0, len(resp.Events))
		for _, e := range resp.Events {
			evs = append(evs, w.s.event(e))
		}
		select {
		case w.in <- store.WatchResult{Events: evs}:
		default:
			fail(fmt.Errorf("watch: %w (%d batches of events undelivered)", store.ErrWatcherTooSlow, cap(w.in)))
			return
		}
	}
	if ctx.Err() == nil {
		fail(errors.New("watch: etcd closed the watch"))
	}
}

func (w *relay) deliver(ctx context.Context) {
	defer close(w.out)
	send := func(r store.WatchResult) bool {
		select {
		case w.out <- r:
			return true
		case <-ctx.Done():
		case <-w.s.baseCtx.Done():
		}
		return false
	}
	for r := range w.in {
		if !send(r) {
			return
		}
	}
	if w.final != nil {
		send(store.WatchResult{Err: w.final})
	}
}

// event maps one etcd event to the store's.
func (s *Store) event(e *clientv3.Event) store.Event {
	var prev []byte
	if e.PrevKv != nil {
		prev = e.PrevKv.Value
	}
	if e.Type == mvccpb.DELETE {
		kv := store.KV{Key: s.kv(e.Kv).Key, Value: prev, ModRevision: e.Kv.ModRevision}
		if e.PrevKv != nil {
			kv.CreateRevision = e.PrevKv.CreateRevision
		}
		return store.Event{Type: store.EventDelete, KV: kv, PrevValue: prev}
	}
	return store.Event{Type: store.EventPut, KV: s.kv(e.Kv), PrevValue: prev, Created: e.IsCreate()}
}
