package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/printers"
)

// bookmarkInterval is how often a watch that asked for bookmarks learns
// the current revision, so that it resumes cheaply after a disconnect.
var bookmarkInterval = 30 * time.Second

func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request, ri *requestInfo) error {
	f, err := s.listFilter(r, ri)
	if err != nil {
		return err
	}
	out, err := negotiate(r, ri.Resource)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	ctx := r.Context()
	rv := q.Get("resourceVersion")
	sendInitial := q.Get("sendInitialEvents")
	bookmarks := isTrue(q.Get("allowWatchBookmarks"))
	timeout, err := s.watchTimeout(q.Get("timeoutSeconds"))
	if err != nil {
		return err
	}
	var fromRev int64
	initial := false
	switch {
	case sendInitial == "true":
		// A streaming list: the state at (at least) rv, then a bookmark
		// that says the initial events are complete.
		initial = true
		if !bookmarks {
			return badRequest("sendInitialEvents requires allowWatchBookmarks=true")
		}
		if rv == "" {
			if err := s.cache.waitFresh(ctx); err != nil {
				return err
			}
		} else if n, err := strconv.ParseInt(rv, 10, 64); err != nil {
			return badRequest("resourceVersion %q is not a valid resource version", rv)
		} else if err := s.waitForResourceVersion(ctx, n); err != nil {
			return err
		}
	case rv == "" || rv == "0":
		initial = sendInitial != "false"
		if rv == "" {
			if err := s.cache.waitFresh(ctx); err != nil {
				return err
			}
		}
		if !initial {
			fromRev = s.cache.revision()
		}
	default:
		n, err := strconv.ParseInt(rv, 10, 64)
		if err != nil || n < 0 {
			return badRequest("resourceVersion %q is not a valid resource version", rv)
		}
		// A resourceVersion the hub has not reached yet (a client that
		// listed from another hub of the fleet, or a made-up one) is not
		// waited for: as kube-apiserver's, the watch starts at once and
		// sends nothing about revisions up to it.
		fromRev = n
	}
	watcher, backlog, startRev, err := s.cache.subscribe(ri.Resource, fromRev, initial, f)
	if errors.Is(err, errTooOld) {
		return apierrors.NewResourceExpired(err.Error())
	}
	if err != nil {
		return err
	}
	defer s.cache.unsubscribe(watcher)

	flusher, _ := w.(http.Flusher)
	if out == outputProtobuf {
		w.Header().Set("Content-Type", mediaProtobufStream)
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(http.StatusOK)
	send := func(line []byte) bool {
		if _, err := w.Write(line); err != nil {
			return false
		}
		s.metrics.watchEvents.Inc()
		return true
	}
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	enc := &eventEncoder{res: ri.Resource, out: out, opts: tableOptions(r)}
	allowed := s.watchAuthorizer(ctx)
	for _, ev := range backlog {
		if line := enc.encode(ev, f); line != nil && !send(line) {
			return nil
		}
	}
	lastRev := startRev
	if initial && sendInitial == "true" {
		if !send(enc.bookmark(startRev, true)) {
			return nil
		}
	}
	flush()

	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var tick <-chan time.Time
	if bookmarks {
		t := time.NewTicker(bookmarkInterval)
		defer t.Stop()
		tick = t.C
	}
	var batch []*cacheEvent
	for {
		select {
		case <-watcher.ready:
			var open bool
			batch, open = watcher.take(batch)
			for _, ev := range batch {
				if ev.rev <= fromRev {
					// Only before the hub reaches a resourceVersion it
					// had not reached when the watch began.
					continue
				}
				lastRev = ev.rev
				if !allowed() {
					// Ending the stream sends the client back to a new
					// watch, which is refused with the reason.
					return nil
				}
				if line := enc.encode(ev, f); line != nil && !send(line) {
					return nil
				}
			}
			clear(batch) // the events are the cache's to let go
			if !open {
				// The watcher fell behind and was dropped: ending the
				// stream makes the client re-watch or re-list.
				return nil
			}
			flush()
		case <-tick:
			if rev, caughtUp := s.cache.quiescentRev(watcher); caughtUp && rev > lastRev {
				lastRev = rev
			}
			if lastRev < fromRev {
				continue
			}
			if !send(enc.bookmark(lastRev, false)) {
				return nil
			}
			flush()
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// WatchRechecker is an Authorizer whose decision about a watch may change
// while the watch runs (it depends on other objects): the watch asks it
// again before each event it sends and ends once refused.
type WatchRechecker interface {
	RecheckWatch(a Attributes) bool
}

// watchAuthorizer is what a watch asks before each event: always yes,
// unless the authorizer says its decision may change (WatchRechecker).
func (s *Server) watchAuthorizer(ctx context.Context) func() bool {
	rr := recordFrom(ctx)
	wr, ok := s.cfg.Authorizer.(WatchRechecker)
	if rr == nil || !ok || !wr.RecheckWatch(rr.attrs) {
		return func() bool { return true }
	}
	attrs := rr.attrs
	return func() bool {
		ok, _, err := s.cfg.Authorizer.Authorize(ctx, attrs)
		return err == nil && ok
	}
}

// watchTimeout is how long a watch lasts: the client's timeoutSeconds
// when it is at most MinWatchTimeout, otherwise (more, or none) a random
// duration between MinWatchTimeout and twice it, and never more than the
// client asked for. No watch lasts for ever, and a hub's watches do not
// all end together. kube-apiserver gives watches without timeoutSeconds
// the same (--min-request-timeout, 1800 s); client-go's reflectors ask for
// 5 to 10 minutes, which is served as asked.
func (s *Server) watchTimeout(v string) (time.Duration, error) {
	least := s.limits.minWatchTimeout
	jittered := least + rand.N(least)
	if v == "" {
		return jittered, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("timeoutSeconds %q is not a valid number of seconds", v)
	}
	asked := time.Duration(min(n, 1<<32)) * time.Second
	switch {
	case n == 0:
		return jittered, nil
	case asked <= least:
		return asked, nil
	}
	return min(asked, jittered), nil
}

// quiescentRev returns the cache revision if the watcher has consumed
// every event up to it, so a bookmark can safely name it.
func (c *watchCache) quiescentRev(w *cacheWatcher) (int64, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.rev, w.pending() == 0
}

// eventEncoder turns cache events into watch stream lines as one watcher
// sees them (selectors turn updates into additions and removals).
type eventEncoder struct {
	res  *api.Resource
	out  outputKind
	opts printers.Options
}

func (e *eventEncoder) encode(ev *cacheEvent, f *filter) []byte {
	typ := ev.typ
	cur := f.matches(ev.cur)
	switch ev.typ {
	case watch.Added, watch.Deleted:
		if !cur {
			return nil
		}
	case watch.Modified:
		prev := f.matches(ev.prev)
		switch {
		case cur && prev:
		case cur:
			typ = watch.Added
		case prev:
			typ = watch.Deleted
		default:
			return nil
		}
	}
	switch e.out {
	case outputTable:
		t, err := printers.Table(ev.cur.obj, e.opts)
		if err != nil {
			return nil
		}
		return encodeEvent(typ, t)
	case outputMetadata:
		return encodeEvent(typ, partialMetadata(e.res, ev.cur.obj))
	}
	if e.out == outputProtobuf {
		obj, frame := ev.protobuf()
		if typ == ev.typ || obj == nil {
			return frame
		}
		return watchFrame(typ, obj)
	}
	if typ == ev.typ {
		return ev.line()
	}
	return watchLine(typ, ev.cur.raw)
}

func (e *eventEncoder) bookmark(rev int64, initialEnd bool) []byte {
	obj := e.res.New()
	if e.out == outputMetadata {
		obj = &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}}
	} else {
		obj.GetObjectKind().SetGroupVersionKind(e.res.GVK())
	}
	m := obj.(metav1.Object)
	m.SetResourceVersion(strconv.FormatInt(rev, 10))
	if initialEnd {
		m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	}
	if e.out == outputTable {
		// kubectl ignores bookmarks; send them as the kind itself.
		obj.GetObjectKind().SetGroupVersionKind(e.res.GVK())
	}
	if e.out == outputProtobuf {
		raw, err := encodeProtobuf(e.res.GVK(), obj)
		if err != nil {
			return nil
		}
		return watchFrame(watch.Bookmark, raw)
	}
	return encodeEvent(watch.Bookmark, obj)
}

func encodeEvent(typ watch.EventType, obj runtime.Object) []byte {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil
	}
	return watchLine(typ, raw)
}
