package secrets

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"flotilla.dev/flotilla/hub/store"
)

// One value that does not open fails its own Get, not the List or the
// Watch of everything; Unreadable says why, naming the Secret and what to
// do; Delete removes it.
func TestUndecryptableValueFailsOnlyItself(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bs := openBolt(t, filepath.Join(t.TempDir(), "state.db"))
	defer bs.Close()
	mine, _ := Wrap(bs, newKey(t))
	mine.KeyFile = "/var/lib/flotilla/hub/pki/secrets.key"
	other, _ := Wrap(bs, newKey(t))
	if _, err := mine.Create(ctx, Prefix+"default/good", []byte(`{"good":1}`)); err != nil {
		t.Fatal(err)
	}
	w, err := mine.Watch(ctx, Prefix, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Create(ctx, Prefix+"default/theirs", []byte(`{"theirs":1}`)); err != nil {
		t.Fatal(err)
	}
	rev, err := mine.Create(ctx, Prefix+"shop/damaged", []byte(`{"damaged":1}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := bs.Get(ctx, Prefix+"shop/damaged")
	raw.Value[len(raw.Value)-1] ^= 1
	if _, err := bs.Update(ctx, raw.Key, raw.Value, rev); err != nil {
		t.Fatal(err)
	}

	// Get: the error, with the KV as stored.
	kv, err := mine.Get(ctx, Prefix+"default/theirs")
	var ue *UndecryptableError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUndecryptable) || kv.ModRevision == 0 || !strings.HasPrefix(string(kv.Value), string(magic)) {
		t.Fatalf("Get = %v, %v; want an UndecryptableError with the sealed KV", kv, err)
	}
	if ue.Namespace != "default" || ue.Name != "theirs" || ue.Reason() != "DecryptionFailed" {
		t.Errorf("error %+v", ue)
	}
	for _, want := range []string{"Secret default/theirs: the stored value cannot be decrypted with /var/lib/flotilla/hub/pki/secrets.key",
		"sealed with key id", "restore the key it was written with, or delete the Secret"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}

	// List: every value, the bad ones sealed; Unreadable tells them apart.
	kvs, _, err := mine.List(ctx, Prefix, 0)
	if err != nil || len(kvs) != 3 {
		t.Fatalf("List = %d values, %v; want 3", len(kvs), err)
	}
	bad := map[string]string{}
	for _, kv := range kvs {
		if err := mine.Unreadable(kv); err != nil {
			bad[kv.Key] = err.Error()
		} else if !strings.HasPrefix(string(kv.Value), "{") {
			t.Errorf("%s: readable but not opened: %q", kv.Key, kv.Value)
		}
	}
	if len(bad) != 2 || !strings.Contains(bad[Prefix+"shop/damaged"], "Secret shop/damaged: ") || !strings.Contains(bad[Prefix+"shop/damaged"], "damaged") {
		t.Errorf("unreadable: %v", bad)
	}
	if err := mine.Unreadable(store.KV{Key: "/core/configmaps/default/x", Value: []byte("{}")}); err != nil {
		t.Errorf("a config map is unreadable: %v", err)
	}

	// Delete removes a value that does not open.
	if _, _, err := mine.Delete(ctx, Prefix+"default/theirs", 0); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := mine.Get(ctx, Prefix+"default/theirs"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get after delete: %v", err)
	}

	// Watch: the bad values come through sealed, and the watch goes on.
	if _, err := mine.Create(ctx, Prefix+"default/later", []byte(`{"later":1}`)); err != nil {
		t.Fatal(err)
	}
	var got []string
	timeout := time.After(10 * time.Second)
	for len(got) < 6 {
		select {
		case res := <-w:
			if res.Err != nil {
				t.Fatalf("the watch ended: %v", res.Err)
			}
			for _, ev := range res.Events {
				state := "open"
				if mine.Unreadable(ev.KV) != nil {
					state = "unreadable"
				}
				got = append(got, ev.Type.String()+" "+strings.TrimPrefix(ev.KV.Key, Prefix)+" "+state)
			}
		case <-timeout:
			t.Fatalf("events so far: %v", got)
		}
	}
	want := []string{"PUT default/good open", "PUT default/theirs unreadable", "PUT shop/damaged open", "PUT shop/damaged unreadable", "DELETE default/theirs unreadable", "PUT default/later open"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("events\n got %v\nwant %v", got, want)
	}
}

func TestUndecryptableErrorDefaults(t *testing.T) {
	s, _ := Wrap(nil, newKey(t))
	err := s.undecryptable(Prefix+"ns/name", "the value is cut short", nil)
	if !strings.Contains(err.Error(), "Secret ns/name: the stored value cannot be decrypted with DATA_DIR/pki/secrets.key (the value is cut short)") {
		t.Errorf("%v", err)
	}
	if err := s.undecryptable("/other/key", "x", nil); !strings.HasPrefix(err.Error(), "/other/key: ") {
		t.Errorf("%v", err)
	}
}
