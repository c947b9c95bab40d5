package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	bolt "go.etcd.io/bbolt"

	"flotilla.dev/flotilla/hub/store"
)

// watchHub fans committed events out to live watchers. The write loop
// publishes under mu, and a watcher switches from replaying the log to live
// delivery under mu, so no event falls between the two or arrives twice.
type watchHub struct {
	mu       sync.Mutex
	rev      int64 // last published revision
	watchers map[*watcher]struct{}
	limit    int
	gauge    func(delta float64)
}

func newWatchHub(rev int64, limit int) *watchHub {
	return &watchHub{rev: rev, watchers: make(map[*watcher]struct{}), limit: limit, gauge: func(float64) {}}
}

// watcher is one live watch. The publisher appends to pending and never
// waits: when pending is full the watcher is marked overflowed, dropped from
// the hub and its goroutine ends the watch with ErrWatcherTooSlow.
type watcher struct {
	prefix string
	next   int64 // first revision to deliver; set when registered

	mu       sync.Mutex
	pending  []store.Event
	overflow bool
	notify   chan struct{}
}

// publish hands the events of one commit, ending at rev, to every watcher.
func (h *watchHub) publish(events []store.Event, rev int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rev = rev
	for w := range h.watchers {
		if w.offer(events, h.limit) {
			select {
			case w.notify <- struct{}{}:
			default:
			}
		}
		if w.overflowed() {
			delete(h.watchers, w)
			h.gauge(-1)
		}
	}
}

// offer queues the events w wants and reports whether it has news.
func (w *watcher) offer(events []store.Event, limit int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.overflow {
		return false
	}
	news := false
	for _, ev := range events {
		if ev.KV.ModRevision < w.next || !strings.HasPrefix(ev.KV.Key, w.prefix) {
			continue
		}
		if len(w.pending) >= limit {
			w.overflow = true
			w.pending = nil
			return true
		}
		w.pending = append(w.pending, ev)
		news = true
	}
	return news
}

func (w *watcher) overflowed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.overflow
}

func (w *watcher) take() ([]store.Event, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	evs := w.pending
	w.pending = nil
	return evs, w.overflow
}

// register makes w live from revision next if everything before next has
// been published; otherwise it returns the last published revision, up to
// which the caller replays from the log before trying again.
func (h *watchHub) register(w *watcher, next int64) (bool, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rev >= next {
		return false, h.rev
	}
	// h.rev may still be behind next-1 when the watch started from a
	// revision committed but not yet published; offer skips those events.
	w.next = next
	h.watchers[w] = struct{}{}
	h.gauge(1)
	return true, 0
}

func (h *watchHub) remove(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.watchers[w]; ok {
		delete(h.watchers, w)
		h.gauge(-1)
	}
}

// Watch delivers the changes under prefix after fromRev: first those in the
// event log, then live ones. fromRev 0 is the empty store's revision, so it
// replays everything (and is ErrCompacted once anything was compacted); a
// watch "from now" starts at the revision of a List or of Revision.
func (s *Store) Watch(ctx context.Context, prefix string, fromRev int64) (<-chan store.WatchResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("watch %q: %w", prefix, err)
	}
	if fromRev < 0 {
		return nil, fmt.Errorf("watch %q from revision %d: a revision is 0 (now) or positive", prefix, fromRev)
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, fmt.Errorf("watch %q: %w", prefix, store.ErrClosed)
	}
	// Counted until Close starts; Close then waits for watchers through bgDone.
	s.bgDone.Add(1)
	s.mu.RUnlock()

	current, compacted := s.ov.current(), s.compacted.Load()
	var err error
	switch {
	case fromRev > current:
		err = fmt.Errorf("revision %d, current is %d: %w", fromRev, current, store.ErrFutureRevision)
	case fromRev < compacted:
		err = fmt.Errorf("revision %d, oldest kept is %d: %w", fromRev, compacted, store.ErrCompacted)
	}
	if err != nil {
		s.bgDone.Done()
		return nil, fmt.Errorf("watch %q: %w", prefix, err)
	}
	out := make(chan store.WatchResult)
	w := &watcher{prefix: prefix, notify: make(chan struct{}, 1)}
	go s.runWatch(ctx, w, fromRev+1, out)
	return out, nil
}

func (s *Store) runWatch(ctx context.Context, w *watcher, next int64, out chan<- store.WatchResult) {
	defer s.bgDone.Done()
	defer close(out)
	defer s.hub.remove(w)

	send := func(r store.WatchResult) bool {
		select {
		case out <- r:
			return true
		case <-ctx.Done():
		case <-s.closing:
		}
		return false
	}
	fail := func(err error) {
		err = fmt.Errorf("watch %q: %w", w.prefix, err)
		if !send(store.WatchResult{Err: err}) {
			s.finalClosed(ctx, w, out)
		}
	}

	for {
		live, upTo := s.hub.register(w, next)
		if live {
			break
		}
		var err error
		next, err = s.replay(ctx, w.prefix, next, upTo, send)
		if errors.Is(err, errStopped) {
			s.finalClosed(ctx, w, out)
			return
		}
		if err != nil {
			fail(err)
			return
		}
	}
	for {
		select {
		case <-w.notify:
		case <-ctx.Done():
			return
		case <-s.closing:
			s.finalClosed(ctx, w, out)
			return
		}
		evs, overflow := w.take()
		if len(evs) > 0 && !send(store.WatchResult{Events: evs}) {
			s.finalClosed(ctx, w, out)
			return
		}
		if overflow {
			s.log.Warn("watcher too slow, ending its watch", "prefix", w.prefix, "buffer", s.opts.WatchBuffer)
			fail(fmt.Errorf("more than %d events undelivered: %w", s.opts.WatchBuffer, store.ErrWatcherTooSlow))
			return
		}
	}
}

// finalClosed tells a watcher ended by Close why, if it is listening.
func (s *Store) finalClosed(ctx context.Context, w *watcher, out chan<- store.WatchResult) {
	select {
	case <-s.closing:
	default:
		return
	}
	if ctx.Err() != nil {
		return
	}
	select {
	case out <- store.WatchResult{Err: fmt.Errorf("watch %q: %w", w.prefix, store.ErrClosed)}:
	default:
	}
}

// errStopped ends a replay whose watcher or store went away; it is not a
// failure to report to the watcher.
var errStopped = errors.New("watch stopped")

// replay sends the logged events under prefix in [next, upTo], a chunk at
// a time, from the overlay's events when the b-tree does not have them yet
// and otherwise from the b-tree's, a read transaction per chunk so that
// none stays open while a consumer is slow. It returns the revision after
// the last one read.
func (s *Store) replay(ctx context.Context, prefix string, next, upTo int64, send func(store.WatchResult) bool) (int64, error) {
	p := []byte(prefix)
	for next <= upTo {
		select {
		case <-ctx.Done():
			return next, errStopped
		case <-s.closing:
			return next, errStopped
		default:
		}
		var batch []store.Event
		if rev, base, events, _ := s.ov.snapshot("", false); next > base {
			if upTo > rev {
				return next, fmt.Errorf("replay to revision %d, the store is at %d", upTo, rev)
			}
			for n := 0; next <= upTo && n < replayChunk; n++ {
				if e := events[next-base-1].rec; strings.HasPrefix(e.Key, prefix) {
					batch = append(batch, e.storeEvent(next))
				}
				next++
			}
			if len(batch) > 0 && !send(store.WatchResult{Events: batch}) {
				return next, errStopped
			}
			continue
		}
		err := s.db.View(func(tx *bolt.Tx) error {
			c := tx.Bucket(eventsBucket).Cursor()
			n := 0
			k, raw := c.Seek(encodeRev(next))
			for ; k != nil && next <= upTo && n < replayChunk; k, raw = c.Next() {
				rev := decodeRev(k)
				if rev != next {
					break
				}
				n++
				next++
				key, err := eventKey(raw)
				if err != nil {
					return fmt.Errorf("event %d: %w", rev, err)
				}
				if !bytes.HasPrefix(key, p) {
					continue
				}
				e, err := decodeEvent(raw)
				if err != nil {
					return fmt.Errorf("event %d: %w", rev, err)
				}
				batch = append(batch, e.storeEvent(rev))
			}
			if n == 0 {
				// The log no longer starts at or before next: a compaction
				// overtook this replay.
				_, compacted := readMeta(tx)
				return fmt.Errorf("revision %d is gone from the log, oldest kept is %d: %w", next, compacted, store.ErrCompacted)
			}
			return nil
		})
		if err != nil {
			return next, err
		}
		if len(batch) > 0 && !send(store.WatchResult{Events: batch}) {
			return next, errStopped
		}
	}
	return next, nil
}
