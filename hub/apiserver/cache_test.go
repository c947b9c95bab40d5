package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub/store"
	"flotilla.dev/flotilla/hub/store/boltstore"
)

func newTestCache(t *testing.T, window, buffer int) (*watchCache, *boltstore.Store) {
	t.Helper()
	st, err := boltstore.Open(filepath.Join(t.TempDir(), "state.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := newWatchCache(log, st, window, buffer, newMetrics(nil, nil, nil))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = c.Run(ctx) }()
	<-c.ready
	return c, st
}

var cmRes, _ = api.ResourceForKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))

func putConfigMap(t *testing.T, st *boltstore.Store, name string) int64 {
	t.Helper()
	data, err := encodeObject(cmRes, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := st.Create(context.Background(), objectKey(cmRes, "default", name), data)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// A watcher that does not read is closed once its buffer is full; writers
// and other watchers carry on, and memory stays bounded by the buffer.
func TestSlowWatcherIsDropped(t *testing.T) {
	c, st := newTestCache(t, 100, 4)
	slow, _, _, err := c.subscribe(cmRes, 0, true, &filter{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fast, _, _, err := c.subscribe(cmRes, 0, true, &filter{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 100)
	go func() {
		n := 0
		for range events(fast) {
			n++
			got <- n
		}
	}()
	// The fast watcher reads each event before the next write, so only
	// the slow one can fall behind (on a busy machine the reader could
	// otherwise lag past the buffer too).
	deadline := time.After(5 * time.Second)
	var last int64
	for i := 0; i < 10; i++ {
		last = putConfigMap(t, st, fmt.Sprintf("cm%d", i))
		select {
		case seen := <-got:
			if seen != i+1 {
				t.Fatalf("the fast watcher has %d events after write %d", seen, i+1)
			}
		case <-deadline:
			t.Fatalf("the fast watcher got %d of 10 events", i)
		}
	}
	if err := c.waitFor(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	// The slow watcher's channel was closed after 4 buffered events.
	n := 0
	for range events(slow) {
		n++
	}
	if n != 4 {
		t.Errorf("slow watcher got %d buffered events before being closed, want 4", n)
	}
	if c.watcherCount() != 1 {
		t.Errorf("watchers = %d, want 1 (the slow one removed)", c.watcherCount())
	}
}

// Resuming from a revision that has left the window is refused, so the
// client re-lists instead of silently missing events.
func TestResumeOutsideWindow(t *testing.T) {
	c, st := newTestCache(t, 3, 10)
	first := putConfigMap(t, st, "a")
	var last int64
	for i := 0; i < 5; i++ {
		last = putConfigMap(t, st, fmt.Sprintf("b%d", i))
	}
	if err := c.waitFor(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := c.subscribe(cmRes, first, false, &filter{}, nil); err == nil {
		t.Fatal("resuming from a revision outside the window must fail")
	}
	_, backlog, _, err := c.subscribe(cmRes, last-2, false, &filter{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(backlog) != 2 || backlog[0].rev != last-1 || backlog[1].rev != last {
		t.Fatalf("backlog from %d: %d events", last-2, len(backlog))
	}
	// Every watcher of one event shares one encoding.
	if &backlog[0].line()[0] != &backlog[0].line()[0] {
		t.Error("an event was encoded twice")
	}
}

var testFeeds sync.Map // *cacheWatcher → chan *cacheEvent

// events is w's queue as a channel, closed once w was dropped and its last
// events were read (tests only; one feed per watcher).
func events(w *cacheWatcher) <-chan *cacheEvent {
	ch := make(chan *cacheEvent)
	if prev, loaded := testFeeds.LoadOrStore(w, ch); loaded {
		return prev.(chan *cacheEvent)
	}
	go func() {
		defer close(ch)
		for range w.ready {
			evs, open := w.take(nil)
			for _, ev := range evs {
				ch <- ev
			}
			if !open {
				return
			}
		}
	}()
	return ch
}

// TestProtobufEventKeepsOneCopy: an event's object in protobuf is the
// tail of its frame, not a second copy held beside it.
func TestProtobufEventKeepsOneCopy(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	ev := &cacheEvent{typ: "ADDED", res: cmRes, cur: &cachedObject{obj: cm}}
	obj, frame := ev.protobuf()
	if len(obj) == 0 || len(frame) <= len(obj) {
		t.Fatalf("object %d bytes, frame %d bytes", len(obj), len(frame))
	}
	if &obj[0] != &frame[len(frame)-len(obj)] {
		t.Error("the event holds the object twice: once alone, once in its frame")
	}
}

// TestWindowReplayedAtStart: a cache started on a store with history
// holds the window's last events, so that watches from before a hub
// restart resume; older ones are refused.
func TestWindowReplayedAtStart(t *testing.T) {
	st, err := boltstore.Open(filepath.Join(t.TempDir(), "state.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var revs []int64
	for i := range 6 {
		revs = append(revs, putConfigMap(t, st, fmt.Sprintf("c%d", i)))
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := newWatchCache(log, st, 3, 10, newMetrics(nil, nil, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Run(ctx) }()
	<-c.ready
	if got := c.revision(); got != revs[5] {
		t.Fatalf("ready at revision %d, want %d (caught up)", got, revs[5])
	}
	if n := len(c.objects[cmRes]); n != 6 {
		t.Errorf("%d objects after the replay, want 6", n)
	}
	_, backlog, _, err := c.subscribe(cmRes, revs[2], false, &filter{}, nil)
	if err != nil {
		t.Fatalf("resuming from %d, inside the replayed window: %v", revs[2], err)
	}
	if len(backlog) != 3 || backlog[0].key != "default/c3" || backlog[2].key != "default/c5" || backlog[0].prev != nil {
		t.Errorf("backlog from %d: %d events", revs[2], len(backlog))
	}
	if _, _, _, err := c.subscribe(cmRes, revs[1], false, &filter{}, nil); !errors.Is(err, errTooOld) {
		t.Errorf("resuming from %d, before the window: %v, want too old", revs[1], err)
	}
}

// failingFirstWatch is a store whose first watch fails at once, as a
// watch too slow for the store's buffer does.
type failingFirstWatch struct {
	store.Store
	failed atomic.Bool
}

func (s *failingFirstWatch) Watch(ctx context.Context, prefix string, fromRev int64) (<-chan store.WatchResult, error) {
	if s.failed.CompareAndSwap(false, true) {
		ch := make(chan store.WatchResult, 1)
		ch <- store.WatchResult{Err: store.ErrWatcherTooSlow}
		close(ch)
		return ch, nil
	}
	return s.Store.Watch(ctx, prefix, fromRev)
}

// TestReadyAfterAReloadDuringTheReplay: a replay cut short (the store's
// watch dropped the cache) reloads the latest state, and the cache is
// ready then — not waiting for ever for the replay that ended.
func TestReadyAfterAReloadDuringTheReplay(t *testing.T) {
	st, err := boltstore.Open(filepath.Join(t.TempDir(), "state.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var last int64
	for i := range 6 {
		last = putConfigMap(t, st, fmt.Sprintf("c%d", i))
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := newWatchCache(log, &failingFirstWatch{Store: st}, 3, 10, newMetrics(nil, nil, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Run(ctx) }()
	select {
	case <-c.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("the cache is not ready 10 s after its replay was cut short")
	}
	if got := c.revision(); got != last {
		t.Errorf("ready at revision %d, want %d", got, last)
	}
}

// A resumed watch's backlog is the events of its resource after its
// revision that its filter concerns, as a scan of the whole window would
// find them, also once the window has turned over many times.
func TestResumedBacklogIsTheWindowsEventsOfItsResource(t *testing.T) {
	c, st := newTestCache(t, 100, 1000)
	ctx := context.Background()
	put := func(res *api.Resource, name string, labels map[string]string, rev int64) int64 {
		t.Helper()
		var obj runtime.Object = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels}}
		if res == podRes {
			obj = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels}}
		}
		data, err := encodeObject(res, obj)
		if err != nil {
			t.Fatal(err)
		}
		key := objectKey(res, "default", name)
		if rev == 0 {
			rev, err = st.Create(ctx, key, data)
		} else {
			rev, err = st.Update(ctx, key, data, rev)
		}
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	revs := map[string]int64{}
	var last int64
	for i := range 450 {
		res, name := cmRes, fmt.Sprintf("cm%d", i%7)
		if i%3 == 0 {
			res, name = podRes, fmt.Sprintf("pod%d", i%5)
		}
		k := res.Kind + "/" + name
		last = put(res, name, map[string]string{"half": fmt.Sprint(i % 2)}, revs[k])
		revs[k] = last
	}
	if err := c.waitFor(ctx, last); err != nil {
		t.Fatal(err)
	}
	half, err := labels.Parse("half=1")
	if err != nil {
		t.Fatal(err)
	}
	filters := map[string]*filter{"all": {}, "one name": {namespace: "default", name: "cm3"}, "a label": {labels: half}}
	c.mu.RLock()
	oldest, newest := c.oldest, c.rev
	var ring []*cacheEvent
	for i := range c.ringLen {
		ring = append(ring, c.ring[(c.ringHead+i)%c.window])
	}
	c.mu.RUnlock()
	if len(ring) != 100 {
		t.Fatalf("the window holds %d events, want 100", len(ring))
	}
	for _, res := range []*api.Resource{cmRes, podRes} {
		for fname, f := range filters {
			for from := oldest; from <= newest; from += 7 {
				var want []int64
				for _, ev := range ring {
					if ev.res == res && ev.rev > from && f.concerns(ev) {
						want = append(want, ev.rev)
					}
				}
				w, backlog, _, err := c.subscribe(res, from, false, f, nil)
				if err != nil {
					t.Fatalf("%s from %d: %v", res.Kind, from, err)
				}
				c.unsubscribe(w)
				var got []int64
				for _, ev := range backlog {
					got = append(got, ev.rev)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s, %s, from %d: backlog %v, want %v", res.Kind, fname, from, got, want)
				}
			}
		}
	}
	if _, _, _, err := c.subscribe(cmRes, oldest-1, false, &filter{}, nil); !errors.Is(err, errTooOld) {
		t.Errorf("resuming before the window: %v, want errTooOld", err)
	}
}

// TestJSONEncodedWhenFirstAsked: a cached object is encoded in JSON when a
// reader first asks for it, not as it is cached, and once for all readers,
// however many ask at once.
func TestJSONEncodedWhenFirstAsked(t *testing.T) {
	c, st := newTestCache(t, 10, 10)
	rev := putConfigMap(t, st, "a")
	if err := c.waitFor(context.Background(), rev); err != nil {
		t.Fatal(err)
	}
	co := c.get(cmRes, "default", "a")
	if co == nil {
		t.Fatal("the cache does not hold the ConfigMap")
	}
	if co.raw != nil {
		t.Fatalf("the cache encoded the object in JSON before anyone asked: %s", co.raw)
	}
	got := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i] = co.json() })
	}
	wg.Wait()
	for i, b := range got {
		if len(b) == 0 || &b[0] != &got[0][0] {
			t.Fatalf("reader %d got an encoding of its own (%d bytes), not the one shared", i, len(b))
		}
	}
	var cm corev1.ConfigMap
	if err := json.Unmarshal(got[0], &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Kind != "ConfigMap" || cm.APIVersion != "v1" || cm.Name != "a" || cm.ResourceVersion != strconv.FormatInt(rev, 10) {
		t.Errorf("encoded %s, want the ConfigMap a at resourceVersion %d with its kind", got[0], rev)
	}
}
