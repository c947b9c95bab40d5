package apiserver

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub/store"
	"flotilla.dev/flotilla/hub/store/boltstore"
)

// brokenStore says values starting with "BROKEN" cannot be read, as
// hub/secrets does for a Secret it cannot decrypt.
type brokenStore struct{ *boltstore.Store }

var errBroken = errors.New("broken value")

func (brokenStore) Unreadable(kv store.KV) error {
	if bytes.HasPrefix(kv.Value, []byte("BROKEN")) {
		return errBroken
	}
	return nil
}

func TestUnreadableObjectsAreSetAside(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := boltstore.Open(filepath.Join(t.TempDir(), "state.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	putConfigMap(t, st, "ok")
	if _, err := st.Create(ctx, objectKey(cmRes, "default", "bad"), []byte("BROKEN")); err != nil {
		t.Fatal(err)
	}
	c := newWatchCache(slog.New(slog.NewTextHandler(io.Discard, nil)), brokenStore{st}, 100, 100, newMetrics(nil, nil, nil))
	go func() { _ = c.Run(ctx) }()
	<-c.ready

	// Loaded: the readable one lists, the other is set aside and reported.
	if objs, _ := c.list(cmRes, &filter{}); len(objs) != 1 || c.get(cmRes, "default", "ok") == nil {
		t.Fatalf("list = %d objects, want the readable one", len(objs))
	}
	if err := c.readError(cmRes, "default", "bad"); !errors.Is(err, errBroken) {
		t.Errorf("readError = %v", err)
	}
	if err := c.readError(cmRes, "default", "ok"); err != nil {
		t.Errorf("readError of a readable object = %v", err)
	}
	if names := c.unreadableIn(cmRes, "default"); len(names) != 1 || names[0] != "bad" {
		t.Errorf("unreadableIn = %v", names)
	}
	expectReport := func(name string) {
		t.Helper()
		select {
		case r := <-c.reports:
			if r.name != name || r.res != cmRes || !errors.Is(r.err, errBroken) || r.rev == 0 {
				t.Errorf("report %+v, want %s", r, name)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no report about %s", name)
		}
	}
	expectReport("bad")

	// A watched object that becomes unreadable is deleted for its
	// watchers; readable again, it is added back.
	w, _, _, err := c.subscribe(cmRes, c.revision(), false, &filter{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.unsubscribe(w)
	next := func(typ watch.EventType, rev int64) {
		t.Helper()
		select {
		case ev := <-events(w):
			if ev.typ != typ || ev.key != "default/ok" || (rev != 0 && ev.cur.rev != rev) {
				t.Fatalf("event %s %s at %d, want %s at %d", ev.typ, ev.key, ev.cur.rev, typ, rev)
			}
			if typ == watch.Deleted {
				if m, _ := ev.cur.obj.(*corev1.ConfigMap); m == nil || m.ResourceVersion != itoa(rev) || !bytes.Contains(ev.cur.json(), []byte(`"resourceVersion":"`+itoa(rev)+`"`)) {
					t.Errorf("the deleted object does not carry the revision that removed it: %s", ev.cur.json())
				}
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s event", typ)
		}
	}
	kv, _ := st.Get(ctx, objectKey(cmRes, "default", "ok"))
	rev, err := st.Update(ctx, kv.Key, []byte("BROKEN now"), kv.ModRevision)
	if err != nil {
		t.Fatal(err)
	}
	next(watch.Deleted, rev)
	expectReport("ok")
	if c.get(cmRes, "default", "ok") != nil || !errors.Is(c.readError(cmRes, "default", "ok"), errBroken) {
		t.Error("the object that became unreadable is still served")
	}
	data, _ := encodeObject(cmRes, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ok", Namespace: "default"}})
	rev, err = st.Update(ctx, kv.Key, data, rev)
	if err != nil {
		t.Fatal(err)
	}
	next(watch.Added, rev)
	if c.get(cmRes, "default", "ok") == nil || c.readError(cmRes, "default", "ok") != nil {
		t.Error("the repaired object is not served")
	}

	// Deleting an unreadable object forgets it, with no watch event.
	if _, _, err := st.Delete(ctx, objectKey(cmRes, "default", "bad"), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.waitFresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.readError(cmRes, "default", "bad"); err != nil {
		t.Errorf("a deleted unreadable object still fails reads: %v", err)
	}
	select {
	case ev := <-events(w):
		t.Errorf("unexpected event %s %s", ev.typ, ev.key)
	case <-time.After(200 * time.Millisecond):
	}

	// A reload reports only what it did not know at that revision.
	c.mu.Lock()
	again := map[*api.Resource]map[string]unreadableObject{}
	for res, objs := range c.unreadable {
		for _, u := range objs {
			addUnreadable(again, res, u)
		}
	}
	c.setUnreadableLocked(again)
	c.mu.Unlock()
	select {
	case r := <-c.reports:
		t.Errorf("reported again after a reload: %+v", r)
	default:
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
