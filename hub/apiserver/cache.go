package apiserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub/store"
)

// cachedObject is one object as the cache holds it: decoded (never mutated
// once cached; callers deep-copy before changing it), with its
// resourceVersion set, and encoded in JSON at most once, so lists and
// watches never re-encode it.
type cachedObject struct {
	obj    runtime.Object
	labels labels.Set
	fields fields.Set
	rev    int64

	rawOnce sync.Once
	raw     []byte
}

// json is the object in JSON. It is encoded when a reader first asks for
// it, not as it is cached: most of a fleet's objects and their versions
// in the event window (Lease renewals, Node status) are read only in
// protobuf, by the devices and the hub's loops, and at 10,000 devices
// their JSON would hold tens of megabytes nobody reads.
func (co *cachedObject) json() []byte {
	co.rawOnce.Do(func() {
		if co.raw == nil {
			co.raw = encodeShared(co.obj)
		}
	})
	return co.raw
}

// cacheEvent is one change seen by the cache. Its encoding as a watch
// event is computed at most once, for every watcher that receives it.
type cacheEvent struct {
	typ  watch.EventType
	res  *api.Resource
	key  string
	cur  *cachedObject // the object after the change (for deletes: its last state)
	prev *cachedObject // nil for creations
	rev  int64

	once    sync.Once
	encoded []byte

	// The same in protobuf, for the watchers that ask for it: the object
	// and the event's frame.
	protoOnce  sync.Once
	protoObj   []byte
	protoFrame []byte
}

func (e *cacheEvent) line() []byte {
	e.once.Do(func() { e.encoded = watchLine(e.typ, e.cur.json()) })
	return e.encoded
}

// protobuf is the changed object in protobuf (nil if it cannot be encoded)
// and the event's watch frame.
func (e *cacheEvent) protobuf() (obj, frame []byte) {
	e.protoOnce.Do(func() {
		var err error
		if e.protoObj, err = encodeProtobuf(e.res.GVK(), e.cur.obj); err == nil {
			e.protoFrame = watchFrame(e.typ, e.protoObj)
			// The object is the frame's last field: keep one copy of it,
			// not two, for as long as the event is in the window.
			if tail := e.protoFrame[max(len(e.protoFrame)-len(e.protoObj), 0):]; bytes.Equal(tail, e.protoObj) {
				e.protoObj = tail
			}
		}
	})
	return e.protoObj, e.protoFrame
}

// watchFrame is one event of a protobuf watch stream: the length, then a
// metav1.WatchEvent holding the object in its protobuf envelope (client-go
// reads it with its length-delimited framer).
func watchFrame(typ watch.EventType, obj []byte) []byte {
	ev := metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: obj}}
	b := make([]byte, 4+ev.Size())
	n, err := ev.MarshalToSizedBuffer(b[4:])
	if err != nil {
		return nil
	}
	binary.BigEndian.PutUint32(b, uint32(n))
	return b
}

func watchLine(typ watch.EventType, raw []byte) []byte {
	b := make([]byte, 0, len(raw)+32)
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","object":`...)
	b = append(b, raw...)
	b = append(b, "}\n"...)
	return b
}

// watchCache mirrors the whole store in memory, following the store's
// watch. It serves lists, gets and watches; a bounded window of recent
// events lets watches resume from a recent resourceVersion.
type watchCache struct {
	log        *slog.Logger
	store      store.Store
	window     int
	bufferSize int

	mu       sync.RWMutex
	rev      int64
	objects  map[*api.Resource]map[string]*cachedObject
	ring     []*cacheEvent // the last len(ring) events, oldest at ringHead
	ringHead int
	ringLen  int
	// byRes holds the ring's events again, by resource: a watch resuming
	// after a hub restart (a fleet's every watch at once) takes the
	// events of its resource since its revision from here, instead of
	// scanning those of every resource, Lease renewals mostly.
	byRes map[*api.Resource]*resEvents
	// oldest is the revision after which every event is still in the ring:
	// a watch may start from any rv >= oldest.
	oldest   int64
	watchers map[*api.Resource]*watcherSet
	// revNow is rev as last published (each event's end), readable
	// without the lock; waiters are the reads waiting for a revision.
	revNow  atomic.Int64
	waiters revWaiters
	ready   chan struct{}
	// readyOnce closes ready, once the cache has caught up.
	readyOnce sync.Once
	metrics   *metrics
	// unreadable are the objects of the store it cannot read, and reports
	// the Events to write about them (unreadable.go).
	unreadable map[*api.Resource]map[string]unreadableObject
	reports    chan unreadableReport
	// usage are the devices' last usage reports by node (usage.go).
	usage map[string]*storedUsage
}

// cacheWatcher is one watch's queue of events. It holds what the watch
// has not sent yet, up to limit, instead of a channel of that capacity: a
// fleet's watchers are idle almost always, and a channel of 1,000 events
// is 8 KiB per watch whether used or not (three watches per device).
type cacheWatcher struct {
	res *api.Resource
	// ready holds a token whenever the queue has events or the watcher
	// was closed.
	ready chan struct{}
	limit int

	mu     sync.Mutex
	queue  []*cacheEvent
	closed bool // by the cache when the watcher fell behind

	// dropped and keys belong to the watcher set (under its lock):
	// whether it was removed, and the index values it is filed under
	// (dispatch.go).
	dropped bool
	keys    []string
}

// newCacheWatcher makes a watcher that signals ready, or a channel of its
// own when ready is nil. The watches of one multiplexed stream share one,
// so that their handler waits on a single channel however many they are.
func newCacheWatcher(res *api.Resource, limit int, ready chan struct{}) *cacheWatcher {
	if ready == nil {
		ready = make(chan struct{}, 1)
	}
	return &cacheWatcher{res: res, ready: ready, limit: limit}
}

// offer queues ce; false when the queue is full.
func (w *cacheWatcher) offer(ce *cacheEvent) bool {
	w.mu.Lock()
	if len(w.queue) >= w.limit {
		w.mu.Unlock()
		return false
	}
	w.queue = append(w.queue, ce)
	w.mu.Unlock()
	w.signal()
	return true
}

func (w *cacheWatcher) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.signal()
}

func (w *cacheWatcher) signal() {
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// take returns the queued events, oldest first, and whether the watcher
// is still open (false once it was closed and this is its last batch).
// spare, the slice of the previous take, is reused for the next events;
// one grown by a burst is let go.
func (w *cacheWatcher) take(spare []*cacheEvent) ([]*cacheEvent, bool) {
	if cap(spare) > 64 {
		spare = nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	evs := w.queue
	w.queue = spare[:0]
	return evs, !w.closed
}

// pending is how many events wait to be sent.
func (w *cacheWatcher) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}

func newWatchCache(log *slog.Logger, st store.Store, window, bufferSize int, m *metrics) *watchCache {
	c := &watchCache{
		log:        log,
		store:      st,
		window:     window,
		bufferSize: bufferSize,
		objects:    map[*api.Resource]map[string]*cachedObject{},
		ring:       make([]*cacheEvent, window),
		byRes:      map[*api.Resource]*resEvents{},
		watchers:   map[*api.Resource]*watcherSet{},
		ready:      make(chan struct{}),
		metrics:    m,
		unreadable: map[*api.Resource]map[string]unreadableObject{},
		reports:    make(chan unreadableReport, reportQueue),
		usage:      map[string]*storedUsage{},
	}
	for _, r := range api.Resources() {
		c.objects[r] = map[string]*cachedObject{}
		c.watchers[r] = newWatcherSet(r)
	}
	return c
}

// Run loads the store and follows it until ctx ends. A store watch that
// fails (compaction overtook it, or it fell behind) is re-established
// from a fresh list; watchers of the cache are then closed so that their
// clients re-list, exactly as after a hub restart.
func (c *watchCache) Run(ctx context.Context) error {
	first := true
	for {
		err := c.loadAndFollow(ctx, first)
		first = false
		if ctx.Err() != nil {
			return nil
		}
		c.log.Warn("watch cache lost the store's watch; reloading", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *watchCache) loadAndFollow(ctx context.Context, first bool) error {
	// At start, the cache loads the state of a window's worth of
	// revisions ago and replays the store's history since, so that its
	// window holds the events before the hub (re)started: the agents of a fleet resume
	// their watches from the revisions they had seen instead of each
	// listing again. It is ready once it has caught up.
	target, compacted, err := c.store.Revision(ctx)
	if err != nil {
		return fmt.Errorf("reading the store's revision: %w", err)
	}
	from := max(target-int64(c.window), compacted, 1) // (0 would be the latest)
	if !first || target == 0 {
		// Reloaded while serving: never back in time.
		from = 0
	}
	kvs, rev, err := c.store.List(ctx, "/", from)
	if errors.Is(err, store.ErrCompacted) {
		// Compacted meanwhile: start from the latest state, without a
		// window.
		kvs, rev, err = c.store.List(ctx, "/", 0)
	}
	if err != nil {
		return fmt.Errorf("listing the store: %w", err)
	}
	objects := map[*api.Resource]map[string]*cachedObject{}
	for _, r := range api.Resources() {
		objects[r] = map[string]*cachedObject{}
	}
	unreadable := map[*api.Resource]map[string]unreadableObject{}
	usage := map[string]*storedUsage{}
	for _, kv := range kvs {
		if node, ok := strings.CutPrefix(kv.Key, usagePrefix); ok {
			if u, err := decodeUsage(kv.Value); err == nil {
				usage[node] = u
			}
			continue
		}
		res, ns, name, ok := parseKey(kv.Key)
		if !ok {
			continue
		}
		if err := c.checkUnreadable(kv); err != nil {
			addUnreadable(unreadable, res, unreadableObject{namespace: ns, name: name, rev: kv.ModRevision, err: err})
			continue
		}
		co, err := c.decode(res, kv.Value, kv.ModRevision)
		if err != nil {
			c.log.Error("skipping undecodable object in the store", "key", kv.Key, "err", err)
			continue
		}
		objects[res][cacheKey(ns, name)] = co
	}
	c.mu.Lock()
	c.objects = objects
	c.usage = usage
	c.setUnreadableLocked(unreadable)
	c.rev = rev
	c.oldest = rev
	c.ringLen = 0
	clear(c.ring)
	c.byRes = map[*api.Resource]*resEvents{}
	if !first {
		for _, ws := range c.watchers {
			ws.mu.Lock()
			for w := range ws.all {
				c.dropLocked(ws, w)
			}
			ws.mu.Unlock()
		}
	}
	c.broadcastLocked()
	c.mu.Unlock()
	// Ready once caught up with the revision the store had at start —
	// also when the first replay was cut short and this is a reload.
	caughtUp := false
	if rev >= target {
		c.readyOnce.Do(func() { close(c.ready) })
		caughtUp = true
	}
	ch, err := c.store.Watch(ctx, "/", rev)
	if err != nil {
		return fmt.Errorf("watching the store: %w", err)
	}
	for res := range ch {
		if res.Err != nil {
			return res.Err
		}
		for _, ev := range res.Events {
			c.apply(ev)
		}
		if !caughtUp && c.revision() >= target {
			c.log.Info("watch cache caught up", "revision", target, "window from", rev)
			c.readyOnce.Do(func() { close(c.ready) })
			caughtUp = true
		}
	}
	return ctx.Err()
}

func (c *watchCache) decode(res *api.Resource, data []byte, rev int64) (*cachedObject, error) {
	obj, err := decodeStored(res, data)
	if err != nil {
		return nil, err
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	m.SetResourceVersion(strconv.FormatInt(rev, 10))
	return &cachedObject{obj: obj, labels: labels.Set(m.GetLabels()), fields: fieldsOf(obj), rev: rev}, nil
}

func (c *watchCache) apply(ev store.Event) {
	if node, ok := strings.CutPrefix(ev.KV.Key, usagePrefix); ok {
		c.applyUsage(ev, node)
		return
	}
	res, ns, name, ok := parseKey(ev.KV.Key)
	rev := ev.KV.ModRevision
	var ce *cacheEvent
	var unreadable error
	if ok {
		if unreadable = c.checkUnreadable(ev.KV); unreadable != nil {
			ok = false
		}
	}
	if ok {
		co, err := c.decode(res, ev.KV.Value, rev)
		if err != nil {
			c.log.Error("skipping undecodable event", "key", ev.KV.Key, "rev", rev, "err", err)
			ok = false
		} else {
			ce = &cacheEvent{res: res, key: cacheKey(ns, name), cur: co, rev: rev}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev > c.rev {
		c.rev = rev
	}
	if unreadable != nil {
		c.applyUnreadableLocked(ev, res, ns, name, unreadable)
	}
	if ok {
		delete(c.unreadable[res], ce.key)
		objs := c.objects[res]
		ce.prev = objs[ce.key]
		if ce.prev != nil && maps.Equal(ce.prev.fields, ce.cur.fields) {
			// Most changes (a Lease renewed, a status reported) leave the
			// selectable fields as they were: the versions in the window
			// share one set instead of a map each.
			ce.cur.fields = ce.prev.fields
		}
		switch {
		case ev.Type == store.EventDelete:
			ce.typ = watch.Deleted
			delete(objs, ce.key)
		case ce.prev == nil:
			ce.typ = watch.Added
			objs[ce.key] = ce.cur
		default:
			ce.typ = watch.Modified
			objs[ce.key] = ce.cur
		}
		c.pushLocked(ce)
		c.dispatchLocked(ce)
	}
	c.broadcastLocked()
}

// dispatchLocked offers ce to the watchers it may concern; one whose
// buffer is full has fallen behind and is dropped.
func (c *watchCache) dispatchLocked(ce *cacheEvent) {
	ws := c.watchers[ce.res]
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.each(ce, func(w *cacheWatcher) {
		if !w.offer(ce) {
			c.dropLocked(ws, w)
		}
	})
}

func (c *watchCache) pushLocked(ce *cacheEvent) {
	if c.window == 0 {
		c.oldest = ce.rev
		return
	}
	re := c.byRes[ce.res]
	if re == nil {
		re = &resEvents{}
		c.byRes[ce.res] = re
	}
	re.push(ce)
	if c.ringLen == c.window {
		// The oldest event leaves the window: watches must now start after it.
		old := c.ring[c.ringHead]
		c.oldest = old.rev
		c.byRes[old.res].popOldest()
		c.ring[c.ringHead] = ce
		c.ringHead = (c.ringHead + 1) % c.window
		return
	}
	c.ring[(c.ringHead+c.ringLen)%c.window] = ce
	c.ringLen++
}

// resEvents is one resource's events in the window, oldest first.
type resEvents struct {
	evs  []*cacheEvent
	head int // evs[head:] are in the window
}

func (r *resEvents) push(ce *cacheEvent) { r.evs = append(r.evs, ce) }

// popOldest drops the oldest event, which has left the window.
func (r *resEvents) popOldest() {
	r.evs[r.head] = nil
	r.head++
	// Move the live events to the front once they are at most half of
	// the slice: each is moved once on average.
	if r.head >= 64 && 2*r.head >= len(r.evs) {
		n := copy(r.evs, r.evs[r.head:])
		clear(r.evs[n:])
		r.evs, r.head = r.evs[:n], 0
	}
}

// after is the events after revision rev, oldest first; the slice is
// the cache's, valid while its lock is held.
func (r *resEvents) after(rev int64) []*cacheEvent {
	if r == nil {
		return nil
	}
	live := r.evs[r.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i].rev > rev })
	return live[i:]
}

// dropLocked: with c.mu and ws.mu held.
func (c *watchCache) dropLocked(ws *watcherSet, w *cacheWatcher) {
	if w.dropped {
		return
	}
	w.dropped = true
	ws.removeLocked(w)
	w.close()
	if c.metrics != nil {
		c.metrics.watchersDropped.Inc()
	}
}

// broadcastLocked publishes rev and wakes the reads waiting for it.
func (c *watchCache) broadcastLocked() {
	c.revNow.Store(c.rev)
	c.waiters.wake(c.rev)
}

// waitFor blocks until the cache has seen revision rev.
func (c *watchCache) waitFor(ctx context.Context, rev int64) error {
	select {
	case <-c.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	if c.revNow.Load() >= rev {
		return nil
	}
	select {
	case <-c.waiters.wait(rev, c.revNow.Load):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitFresh waits until the cache has every write acknowledged before the
// call, so that a client reads its own writes.
func (c *watchCache) waitFresh(ctx context.Context) error {
	cur, _, err := c.store.Revision(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.waitFor(ctx, cur); err != nil {
		return fmt.Errorf("waiting for the watch cache to reach revision %d: %w", cur, err)
	}
	return nil
}

// filter selects objects for a list or watch.
type filter struct {
	namespace string
	name      string
	labels    labels.Selector
	fields    fields.Selector
}

func (f *filter) matches(co *cachedObject) bool {
	if co == nil {
		return false
	}
	if f.namespace != "" && co.fields["metadata.namespace"] != f.namespace {
		return false
	}
	if f.name != "" && co.fields["metadata.name"] != f.name {
		return false
	}
	if f.labels != nil && !f.labels.Empty() && !f.labels.Matches(co.labels) {
		return false
	}
	if f.fields != nil && !f.fields.Empty() && !f.fields.Matches(co.fields) {
		return false
	}
	return true
}

// concerns tells whether a watch with filter f sends anything of ev:
// the object matched after the change, or before it.
func (f *filter) concerns(ev *cacheEvent) bool {
	return f.matches(ev.cur) || ev.typ == watch.Modified && f.matches(ev.prev)
}

// applyUsage keeps a device's last usage report. A report that does not
// decode is dropped (the hub stored it, so only another version could
// have written it), and the device has none until its next.
func (c *watchCache) applyUsage(ev store.Event, node string) {
	var u *storedUsage
	if ev.Type != store.EventDelete {
		var err error
		if u, err = decodeUsage(ev.KV.Value); err != nil {
			c.log.Warn("skipping an undecodable usage report", "node", node, "err", err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ev.KV.ModRevision > c.rev {
		c.rev = ev.KV.ModRevision
	}
	if u == nil {
		delete(c.usage, node)
	} else {
		c.usage[node] = u
	}
	c.broadcastLocked()
}

// usageOf is the device's last usage report, or nil.
func (c *watchCache) usageOf(node string) *storedUsage {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.usage[node]
}

// get returns the cached object, or nil.
func (c *watchCache) get(res *api.Resource, namespace, name string) *cachedObject {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.objects[res][cacheKey(namespace, name)]
}

// list returns the matching objects in key order and the revision they are
// consistent at.
func (c *watchCache) list(res *api.Resource, f *filter) ([]*cachedObject, int64) {
	c.mu.RLock()
	objs := c.objects[res]
	out := make([]*cachedObject, 0, 16)
	keys := make([]string, 0, 16)
	if f.name != "" {
		if co := objs[cacheKey(f.namespace, f.name)]; f.matches(co) {
			out, keys = append(out, co), append(keys, "")
		}
	} else {
		for k, co := range objs {
			if f.matches(co) {
				out = append(out, co)
				keys = append(keys, k)
			}
		}
	}
	rev := c.rev
	c.mu.RUnlock()
	sort.Sort(byKey{keys, out})
	return out, rev
}

type byKey struct {
	keys []string
	objs []*cachedObject
}

func (b byKey) Len() int           { return len(b.keys) }
func (b byKey) Less(i, j int) bool { return b.keys[i] < b.keys[j] }
func (b byKey) Swap(i, j int) {
	b.keys[i], b.keys[j] = b.keys[j], b.keys[i]
	b.objs[i], b.objs[j] = b.objs[j], b.objs[i]
}

var errTooOld = errors.New("too old resource version")

// subscribe registers a watcher of res. With initial, the backlog is the
// current state (as synthetic ADDED events); otherwise it is every event
// after fromRev still in the window, or errTooOld.
// subscribe holds the cache's read lock only: events are applied under
// its write lock, so the backlog and the watcher's filing are still one
// step to them, while the watches of a reconnecting fleet subscribe side
// by side (the watcher set has its own lock for that).
func (c *watchCache) subscribe(res *api.Resource, fromRev int64, initial bool, f *filter, ready chan struct{}) (*cacheWatcher, []*cacheEvent, int64, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var backlog []*cacheEvent
	if initial {
		keys := make([]string, 0)
		objs := make([]*cachedObject, 0)
		for k, co := range c.objects[res] {
			if f.matches(co) {
				keys = append(keys, k)
				objs = append(objs, co)
			}
		}
		sort.Sort(byKey{keys, objs})
		for i, co := range objs {
			backlog = append(backlog, &cacheEvent{typ: watch.Added, res: res, key: keys[i], cur: co, rev: co.rev})
		}
	} else {
		if fromRev < c.oldest {
			return nil, nil, 0, fmt.Errorf("%w: %d (the oldest this hub can resume from is %d)", errTooOld, fromRev, c.oldest)
		}
		// Only the events of res after fromRev, and of those only the
		// ones the watch will send: after a DaemonSet rolled out, the
		// window holds every device's pod events, and each device's
		// watch of its own pods resumes at once.
		for _, ev := range c.byRes[res].after(fromRev) {
			if f.concerns(ev) {
				backlog = append(backlog, ev)
			}
		}
	}
	w := newCacheWatcher(res, c.bufferSize, ready)
	c.watchers[res].add(w, f)
	return w, backlog, c.rev, nil
}

func (c *watchCache) unsubscribe(w *cacheWatcher) {
	ws := c.watchers[w.res]
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if !w.dropped {
		w.dropped = true
		ws.removeLocked(w)
	}
}

func (c *watchCache) watcherCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := 0
	for _, ws := range c.watchers {
		ws.mu.Lock()
		n += len(ws.all)
		ws.mu.Unlock()
	}
	return n
}

func (c *watchCache) revision() int64 { return c.revNow.Load() }
