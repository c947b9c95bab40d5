package apiserver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api"
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
	c := newWatchCache(log, st, window, buffer, newMetrics(nil, nil))
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
	slow, _, _, err := c.subscribe(cmRes, 0, true, &filter{})
	if err != nil {
		t.Fatal(err)
	}
	fast, _, _, err := c.subscribe(cmRes, 0, true, &filter{})
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
	if _, _, _, err := c.subscribe(cmRes, first, false, &filter{}); err == nil {
		t.Fatal("resuming from a revision outside the window must fail")
	}
	_, backlog, _, err := c.subscribe(cmRes, last-2, false, &filter{})
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
