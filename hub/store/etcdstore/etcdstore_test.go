package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"flotilla.dev/flotilla/hub/store"
	"flotilla.dev/flotilla/hub/store/etcdstore/etcdtest"
	"flotilla.dev/flotilla/hub/store/storetest"
)

func startEtcd(t testing.TB, dir string) string {
	t.Helper()
	return etcdtest.Start(t, dir).URL
}

func open(t testing.TB, endpoint string) *Store {
	t.Helper()
	s, err := New(context.Background(), Config{Endpoints: []string{endpoint}, WatchBuffer: 64})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestContract(t *testing.T) {
	endpoints := map[store.Store]string{}
	storetest.Run(t, func(t *testing.T) store.Store {
		ep := startEtcd(t, t.TempDir())
		s := open(t, ep)
		endpoints[s] = ep
		return s
	},
		storetest.WithReopen(func(t *testing.T, old store.Store) store.Store {
			ep := endpoints[old]
			old.Close()
			s := open(t, ep)
			endpoints[s] = ep
			return s
		}),
		storetest.WithSlowWatcherWrites(500),
	)
}

// Two hubs on one etcd see one store: a write on one is read and watched
// on the other, a stale write is a conflict wherever it comes from,
// compaction by one is seen by the other, and keys outside the prefix
// (another user of the same etcd) are neither seen nor counted.
func TestTwoHubsShareOneEtcd(t *testing.T) {
	ep := startEtcd(t, t.TempDir())
	a, b := open(t, ep), open(t, ep)
	defer a.Close()
	defer b.Close()
	ctx := t.Context()

	other, err := New(ctx, Config{Endpoints: []string{ep}, Prefix: "/someone-else"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Create(ctx, "/pods/default/web", []byte("theirs")); err != nil {
		t.Fatal(err)
	}

	ch, err := b.Watch(ctx, "/pods/", 0)
	if err != nil {
		t.Fatal(err)
	}
	r1, err := a.Create(ctx, "/pods/default/web", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-ch:
		if res.Err != nil || len(res.Events) != 1 || res.Events[0].KV.Key != "/pods/default/web" || string(res.Events[0].KV.Value) != "v1" || res.Events[0].KV.ModRevision != r1 {
			t.Fatalf("hub b watched %+v, want the creation on hub a at %d", res, r1)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("hub b saw nothing of hub a's write")
	}
	kv, err := b.Get(ctx, "/pods/default/web")
	if err != nil || string(kv.Value) != "v1" {
		t.Fatalf("hub b reads %q, %v", kv.Value, err)
	}
	if _, err := a.Update(ctx, "/pods/default/web", []byte("v2"), r1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Update(ctx, "/pods/default/web", []byte("stale"), r1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a stale write on hub b: %v, want ErrConflict", err)
	}
	list, _, err := b.List(ctx, "/", 0)
	if err != nil || len(list) != 1 || string(list[0].Value) != "v2" {
		t.Fatalf("hub b lists %v, %v: want only Flotilla's object", list, err)
	}

	cur, _, err := a.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Compact(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if _, comp, err := b.Revision(ctx); err != nil || comp != cur {
		t.Fatalf("hub b sees compaction at %d, %v; want %d", comp, err, cur)
	}
	if _, err := b.Watch(ctx, "/pods/", r1); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("watch from before hub a's compaction: %v, want ErrCompacted", err)
	}
}

func TestConfigErrors(t *testing.T) {
	for name, c := range map[string]struct {
		cfg  Config
		want string
	}{
		"no endpoints": {Config{}, "no etcd endpoints"},
		"bad prefix":   {Config{Endpoints: []string{"http://127.0.0.1:1"}, Prefix: "flotilla/"}, "must start with /"},
		"unreachable":  {Config{Endpoints: []string{"http://127.0.0.1:1"}, DialTimeout: 500 * time.Millisecond}, "does not answer"},
	} {
		if _, err := New(context.Background(), c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
}

// With a three-member etcd, losing a member that does not lead loses
// nothing: writes and watches go on through the others. (Losing the
// leader ends the watches — they require one, so that none hangs on a
// member cut off from the rest — and their consumers resume them; the
// watch cache does.)
func TestMemberLoss(t *testing.T) {
	members := etcdtest.StartCluster(t, t.TempDir(), 3)
	s, err := New(t.Context(), Config{Endpoints: etcdtest.URLs(members)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	ch, err := s.Watch(ctx, "/pods/", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "/pods/default/a", []byte("a")); err != nil {
		t.Fatal(err)
	}
	follower := members[0]
	for _, m := range members {
		if !m.IsLeader() {
			follower = m
			break
		}
	}
	follower.Stop()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r2, err := s.Create(wctx, "/pods/default/b", []byte("b"))
	if err != nil {
		t.Fatalf("a write with one member of three gone: %v", err)
	}
	var got []string
	for len(got) < 2 {
		select {
		case res := <-ch:
			if res.Err != nil {
				t.Fatalf("the watch ended: %v", res.Err)
			}
			for _, ev := range res.Events {
				got = append(got, ev.KV.Key)
			}
		case <-wctx.Done():
			t.Fatalf("the watch delivered %v, then nothing", got)
		}
	}
	if kv, err := s.Get(ctx, "/pods/default/b"); err != nil || kv.ModRevision != r2 {
		t.Fatalf("read after the loss: %+v %v", kv, err)
	}
}

// RunCompaction keeps one interval of history: after two ticks, what was
// current at the first is the compacted revision.
func TestRunCompaction(t *testing.T) {
	s := open(t, startEtcd(t, t.TempDir()))
	defer s.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r1, err := s.Create(ctx, "/c/a", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.RunCompaction(ctx, 300*time.Millisecond, t.Logf) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := s.Create(ctx, fmt.Sprintf("/c/%d", time.Now().UnixNano()), nil); err != nil {
			t.Fatal(err)
		}
		_, comp, err := s.Revision(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if comp > r1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing compacted past %d within 10s (compacted %d)", r1, comp)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := s.Watch(ctx, "/c/", r1-1); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("a watch from before the compaction: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
