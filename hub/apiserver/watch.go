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
	var attrs *Attributes
	if rr := recordFrom(r.Context()); rr != nil {
		attrs = &rr.attrs
	}
	wr, err := s.startWatch(r, ri, attrs, nil)
	if err != nil {
		return err
	}
	defer s.cache.unsubscribe(wr.watcher)
	ctx := r.Context()

	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", wr.contentType())
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(http.StatusOK)
	send := func(line []byte, _ int64) bool {
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
	if !wr.sendBacklog(send) {
		return nil
	}
	flush()

	deadline := time.NewTimer(wr.timeout)
	defer deadline.Stop()
	var tick <-chan time.Time
	if wr.bookmarks {
		t := time.NewTicker(bookmarkInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-wr.watcher.ready:
			if !wr.drain(send) {
				return nil
			}
			flush()
		case <-tick:
			if line, rev := wr.progress(s.cache); line != nil {
				if !send(line, rev) {
					return nil
				}
				flush()
			}
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// watchRun is one watch being served, alone on its stream or beside
// others on a multiplexed one.
type watchRun struct {
	watcher *cacheWatcher
	backlog []*cacheEvent
	enc     *eventEncoder
	f       *filter
	// fromRev: events up to it are not sent (a resourceVersion the hub
	// had not reached when the watch began); lastRev: what the watch has
	// seen every event up to.
	fromRev, lastRev int64
	// initial: the backlog is the objects' current state, not events
	// after fromRev; initialEnd: a bookmark says where that state ends.
	initial, initialEnd bool
	bookmarks           bool
	timeout             time.Duration
	allowed             func() bool
	batch               []*cacheEvent
}

// startWatch checks a watch's request and subscribes it to the cache;
// attrs are what the request was authorized with (nil: not rechecked).
// A non-nil ready is the channel the watcher signals (shared by the
// watches of one multiplexed stream).
func (s *Server) startWatch(r *http.Request, ri *requestInfo, attrs *Attributes, ready chan struct{}) (*watchRun, error) {
	f, err := s.listFilter(r, ri)
	if err != nil {
		return nil, err
	}
	out, err := negotiate(r, ri.Resource)
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	ctx := r.Context()
	rv := q.Get("resourceVersion")
	sendInitial := q.Get("sendInitialEvents")
	bookmarks := isTrue(q.Get("allowWatchBookmarks"))
	timeout, err := s.watchTimeout(q.Get("timeoutSeconds"))
	if err != nil {
		return nil, err
	}
	var fromRev int64
	initial := false
	switch {
	case sendInitial == "true":
		// A streaming list: the state at (at least) rv, then a bookmark
		// that says the initial events are complete.
		initial = true
		if !bookmarks {
			return nil, badRequest("sendInitialEvents requires allowWatchBookmarks=true")
		}
		if rv == "" {
			if err := s.cache.waitFresh(ctx); err != nil {
				return nil, err
			}
		} else if n, err := strconv.ParseInt(rv, 10, 64); err != nil {
			return nil, badRequest("resourceVersion %q is not a valid resource version", rv)
		} else if err := s.waitForResourceVersion(ctx, n); err != nil {
			return nil, err
		}
	case rv == "" || rv == "0":
		initial = sendInitial != "false"
		if rv == "" {
			if err := s.cache.waitFresh(ctx); err != nil {
				return nil, err
			}
		}
		if !initial {
			fromRev = s.cache.revision()
		}
	default:
		n, err := strconv.ParseInt(rv, 10, 64)
		if err != nil || n < 0 {
			return nil, badRequest("resourceVersion %q is not a valid resource version", rv)
		}
		// A resourceVersion the hub has not reached yet (a client that
		// listed from another hub of the fleet, or a made-up one) is not
		// waited for: as kube-apiserver's, the watch starts at once and
		// sends nothing about revisions up to it.
		fromRev = n
	}
	watcher, backlog, startRev, err := s.cache.subscribe(ri.Resource, fromRev, initial, f, ready)
	if errors.Is(err, errTooOld) {
		return nil, apierrors.NewResourceExpired(err.Error())
	}
	if err != nil {
		return nil, err
	}
	allowed := func() bool { return true }
	if attrs != nil {
		allowed = s.watchAuthorizer(ctx, *attrs)
	}
	return &watchRun{watcher: watcher, backlog: backlog, f: f, fromRev: fromRev, lastRev: startRev,
		enc:     &eventEncoder{res: ri.Resource, out: out, opts: tableOptions(r)},
		initial: initial, initialEnd: initial && sendInitial == "true", bookmarks: bookmarks,
		timeout: timeout, allowed: allowed}, nil
}

func (wr *watchRun) contentType() string {
	if wr.enc.out == outputProtobuf {
		return mediaProtobufStream
	}
	return "application/json"
}

// sendBacklog sends what the watch starts with: the initial state or the
// events since the revision it resumes from, and the bookmark that ends
// a streaming list. send gets each line with the revision the watch has
// then seen every event up to (0 within an initial state).
func (wr *watchRun) sendBacklog(send func(line []byte, rev int64) bool) bool {
	for _, ev := range wr.backlog {
		rev := ev.rev
		if wr.initial {
			rev = 0
		}
		if line := wr.enc.encode(ev, wr.f); line != nil && !send(line, rev) {
			return false
		}
	}
	wr.backlog = nil
	if wr.initialEnd {
		return send(wr.enc.bookmark(wr.lastRev, true), wr.lastRev)
	}
	return true
}

// drain sends the events queued for the watch; false when the watch must
// end (the client is no longer allowed, it fell behind and was dropped,
// or send failed).
func (wr *watchRun) drain(send func(line []byte, rev int64) bool) bool {
	var open bool
	wr.batch, open = wr.watcher.take(wr.batch)
	defer clear(wr.batch) // the events are the cache's to let go
	for _, ev := range wr.batch {
		if ev.rev <= wr.fromRev {
			// Only before the hub reaches a resourceVersion it had not
			// reached when the watch began.
			continue
		}
		wr.lastRev = ev.rev
		if !wr.allowed() {
			// Ending the stream sends the client back to a new watch,
			// which is refused with the reason.
			return false
		}
		if line := wr.enc.encode(ev, wr.f); line != nil && !send(line, ev.rev) {
			return false
		}
	}
	// A watcher that fell behind was dropped: ending the stream makes
	// the client re-watch or re-list.
	return open
}

// progress moves the watch to the cache's revision when it has consumed
// every event up to it, and returns the bookmark that says so (nil when
// the watch asked for none, or has nothing to tell yet).
func (wr *watchRun) progress(c *watchCache) ([]byte, int64) {
	if rev, caughtUp := c.quiescentRev(wr.watcher); caughtUp && rev > wr.lastRev {
		wr.lastRev = rev
	}
	if wr.lastRev < wr.fromRev || !wr.bookmarks {
		return nil, wr.lastRev
	}
	return wr.enc.bookmark(wr.lastRev, false), wr.lastRev
}

// WatchRechecker is an Authorizer whose decision about a watch may change
// while the watch runs (it depends on other objects): the watch asks it
// again before each event it sends and ends once refused.
type WatchRechecker interface {
	RecheckWatch(a Attributes) bool
}

// watchAuthorizer is what a watch asks before each event: always yes,
// unless the authorizer says its decision may change (WatchRechecker).
func (s *Server) watchAuthorizer(ctx context.Context, attrs Attributes) func() bool {
	wr, ok := s.cfg.Authorizer.(WatchRechecker)
	if !ok || !wr.RecheckWatch(attrs) {
		return func() bool { return true }
	}
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
	// Without the cache's lock, which every watch's wake-up would take:
	// an event is offered to its watchers before its revision is
	// published, so a watch with nothing pending after rev was read has
	// seen every event up to rev that concerns it.
	rev := c.revNow.Load()
	return rev, w.pending() == 0
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
	return watchLine(typ, ev.cur.json())
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
