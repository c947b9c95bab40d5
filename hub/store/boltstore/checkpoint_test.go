package boltstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"flotilla.dev/flotilla/hub/store"
	"flotilla.dev/flotilla/hub/store/boltstore"
)

// TestReadsDuringCheckpoints: while one writer creates, updates and deletes
// keys and checkpoints move its writes from the log into the b-tree every
// millisecond, every List (now and at past revisions), Get and watch sees
// exactly the state the acknowledged writes describe at its revision —
// never a mix of the overlay's and the b-tree's.
func TestReadsDuringCheckpoints(t *testing.T) {
	s, err := boltstore.Open(filepath.Join(t.TempDir(), "state.db"), boltstore.Options{
		CheckpointInterval: time.Millisecond,
		LogSegmentBytes:    8 << 10,
		HistoryLimit:       -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	type write struct {
		key, value string
		deleted    bool
	}
	const writes = 3000
	var (
		mu      sync.Mutex
		history = make([]write, 1, writes+1) // by revision, from 1
		acked   atomic.Int64
	)
	stateAt := func(rev int64) map[string]store.KV {
		mu.Lock()
		defer mu.Unlock()
		state := map[string]store.KV{}
		for r := int64(1); r <= rev; r++ {
			w := history[r]
			if w.deleted {
				delete(state, w.key)
				continue
			}
			created := state[w.key].CreateRevision
			if created == 0 {
				created = r
			}
			state[w.key] = store.KV{Key: w.key, Value: []byte(w.value), ModRevision: r, CreateRevision: created}
		}
		return state
	}
	waitAcked := func(rev int64) {
		for acked.Load() < rev {
			if ctx.Err() != nil {
				t.Errorf("revision %d was read but never acknowledged", rev)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}

	ch, err := s.Watch(ctx, "/k/", 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		exists := map[string]bool{}
		for n := range writes {
			key := fmt.Sprintf("/k/%02d", n%40)
			val := fmt.Sprintf("v%d", n)
			var (
				rev int64
				err error
				w   = write{key: key, value: val}
			)
			switch {
			case exists[key] && n%7 == 3:
				_, rev, err = s.Delete(ctx, key, 0)
				w = write{key: key, deleted: true}
			case exists[key]:
				rev, err = s.Update(ctx, key, []byte(val), 0)
			default:
				rev, err = s.Create(ctx, key, []byte(val))
			}
			if err != nil {
				t.Errorf("write %d: %v", n, err)
				return
			}
			exists[key] = !w.deleted
			mu.Lock()
			if rev != int64(len(history)) {
				t.Errorf("write %d got revision %d, want %d", n, rev, len(history))
			}
			history = append(history, w)
			mu.Unlock()
			acked.Store(rev)
		}
	}()

	check := func(what string, got []store.KV, want map[string]store.KV) {
		if len(got) != len(want) {
			t.Errorf("%s: %d objects, want %d", what, len(got), len(want))
			return
		}
		for i, kv := range got {
			if i > 0 && got[i-1].Key >= kv.Key {
				t.Errorf("%s: %q listed after %q", what, kv.Key, got[i-1].Key)
			}
			w, ok := want[kv.Key]
			if !ok || string(w.Value) != string(kv.Value) || w.ModRevision != kv.ModRevision || w.CreateRevision != kv.CreateRevision {
				t.Errorf("%s: %s = %q at %d (created %d), want %q at %d (created %d)", what, kv.Key, kv.Value, kv.ModRevision, kv.CreateRevision, w.Value, w.ModRevision, w.CreateRevision)
			}
		}
	}
	lists := atomic.Int64{}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				got, rev, err := s.List(ctx, "/k/", 0)
				if err != nil {
					t.Errorf("list: %v", err)
					return
				}
				waitAcked(rev)
				check(fmt.Sprintf("list at %d", rev), got, stateAt(rev))
				if rev > 1 {
					past := 1 + rand.Int64N(rev)
					got, at, err := s.List(ctx, "/k/", past)
					if err != nil || at != past {
						t.Errorf("list at %d: at %d, %v", past, at, err)
						return
					}
					check(fmt.Sprintf("list at past %d", past), got, stateAt(past))
				}
				key := fmt.Sprintf("/k/%02d", rand.IntN(40))
				if kv, err := s.Get(ctx, key); err == nil {
					waitAcked(kv.ModRevision)
					mu.Lock()
					w := history[kv.ModRevision]
					mu.Unlock()
					if w.key != key || w.deleted || w.value != string(kv.Value) {
						t.Errorf("get %s: %q at %d, which wrote %+v", key, kv.Value, kv.ModRevision, w)
					}
				}
				lists.Add(1)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("%d rounds of lists and gets during %d writes", lists.Load(), writes)

	for next := int64(1); next <= writes; {
		r, ok := <-ch
		if !ok || r.Err != nil {
			t.Fatalf("watch ended at revision %d: %v", next, r.Err)
		}
		for _, ev := range r.Events {
			w := history[next]
			if ev.KV.ModRevision != next || ev.KV.Key != w.key || (ev.Type == store.EventDelete) != w.deleted || (!w.deleted && string(ev.KV.Value) != w.value) {
				t.Fatalf("watch: %s %s %q at %d, want %+v at %d", ev.Type, ev.KV.Key, ev.KV.Value, ev.KV.ModRevision, w, next)
			}
			next++
		}
	}
	// A watch that starts after the fact replays the same from wherever
	// the revisions now are, b-tree or overlay.
	for _, from := range []int64{0, writes / 2, writes - 3} {
		ch, err := s.Watch(ctx, "/k/", from)
		if err != nil {
			t.Fatal(err)
		}
		for next := from + 1; next <= writes; {
			r := <-ch
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			for _, ev := range r.Events {
				if ev.KV.ModRevision != next || ev.KV.Key != history[next].key {
					t.Fatalf("replay from %d: %s at %d, want %s at %d", from, ev.KV.Key, ev.KV.ModRevision, history[next].key, next)
				}
				next++
			}
		}
	}
}
