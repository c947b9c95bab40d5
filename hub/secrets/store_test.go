package secrets

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"flotilla.dev/flotilla/hub/store"
	"flotilla.dev/flotilla/hub/store/boltstore"
	"flotilla.dev/flotilla/hub/store/storetest"
)

func openBolt(t *testing.T, path string) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(path, boltstore.Options{WatchBuffer: 256})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newKey(t *testing.T) []byte {
	t.Helper()
	k, err := LoadOrCreateKey(filepath.Join(t.TempDir(), KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// The wrapper, encrypting every key, must still be a Store.
func TestContract(t *testing.T) {
	key := newKey(t)
	wrap := func(t *testing.T, bs *boltstore.Store) store.Store {
		s, err := Wrap(bs, key)
		if err != nil {
			t.Fatal(err)
		}
		s.prefix = ""
		return s
	}
	storetest.Run(t,
		func(t *testing.T) store.Store { return wrap(t, openBolt(t, filepath.Join(t.TempDir(), "state.db"))) },
		storetest.WithReopen(func(t *testing.T, old store.Store) store.Store {
			bs := old.(*Store).Store.(*boltstore.Store)
			if err := bs.Close(); err != nil {
				t.Fatal(err)
			}
			return wrap(t, openBolt(t, bs.Path()))
		}),
		storetest.WithSlowWatcherWrites(2000),
	)
}

func TestNoPlaintextOnDisk(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	bs := openBolt(t, path)
	s, err := Wrap(bs, newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte(`{"data":{"password":"hunter2-very-secret"}}`)
	rev, err := s.Create(ctx, Prefix+"default/db", secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, Prefix+"default/db", append(secret, ' '), rev); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "/core/configmaps/default/plain", []byte("visible-config")); err != nil {
		t.Fatal(err)
	}
	kv, err := s.Get(ctx, Prefix+"default/db")
	if err != nil || !bytes.Equal(bytes.TrimSpace(kv.Value), secret) {
		t.Fatalf("Get = %q, %v; want the plaintext back", kv.Value, err)
	}
	raw, err := bs.Get(ctx, Prefix+"default/db")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(raw.Value, magic) {
		t.Errorf("stored value does not start with %q", magic)
	}
	if err := bs.Close(); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(file, []byte("hunter2")) {
		t.Error("state.db holds the secret in plaintext")
	}
	if !bytes.Contains(file, []byte("visible-config")) {
		t.Error("state.db does not hold the config map: the test reads the wrong file")
	}
}

func TestWatchAndListDecrypt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bs := openBolt(t, filepath.Join(t.TempDir(), "state.db"))
	defer bs.Close()
	s, err := Wrap(bs, newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Watch(ctx, Prefix, 0)
	if err != nil {
		t.Fatal(err)
	}
	rev, _ := s.Create(ctx, Prefix+"a/x", []byte("one"))
	if _, err := s.Update(ctx, Prefix+"a/x", []byte("two"), rev); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Delete(ctx, Prefix+"a/x", 0); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 3 {
		res := <-w
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		for _, ev := range res.Events {
			got = append(got, ev.Type.String()+":"+string(ev.KV.Value)+"<"+string(ev.PrevValue))
		}
	}
	want := []string{"PUT:one<", "PUT:two<one", "DELETE:two<two"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d = %q, want %q", i, got[i], want[i])
		}
	}
	if _, err := s.Create(ctx, Prefix+"a/y", []byte("three")); err != nil {
		t.Fatal(err)
	}
	kvs, _, err := s.List(ctx, Prefix, 0)
	if err != nil || len(kvs) != 1 || string(kvs[0].Value) != "three" {
		t.Errorf("List = %v, %v", kvs, err)
	}
}

func TestWrongKeyAndSwappedValues(t *testing.T) {
	ctx := context.Background()
	bs := openBolt(t, filepath.Join(t.TempDir(), "state.db"))
	defer bs.Close()
	s1, _ := Wrap(bs, newKey(t))
	if _, err := s1.Create(ctx, Prefix+"a/x", []byte("x-value")); err != nil {
		t.Fatal(err)
	}
	s2, _ := Wrap(bs, newKey(t))
	if _, err := s2.Get(ctx, Prefix+"a/x"); !errors.Is(err, ErrUndecryptable) {
		t.Errorf("another key: err = %v, want ErrUndecryptable", err)
	}
	// A sealed value moved under another key does not open.
	raw, _ := bs.Get(ctx, Prefix+"a/x")
	if _, err := bs.Create(ctx, Prefix+"a/y", raw.Value); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Get(ctx, Prefix+"a/y"); !errors.Is(err, ErrUndecryptable) {
		t.Errorf("swapped value: err = %v, want ErrUndecryptable", err)
	}
}

func TestEncryptExisting(t *testing.T) {
	ctx := context.Background()
	bs := openBolt(t, filepath.Join(t.TempDir(), "state.db"))
	defer bs.Close()
	if _, err := bs.Create(ctx, Prefix+"a/old", []byte("plain-old")); err != nil {
		t.Fatal(err)
	}
	s, _ := Wrap(bs, newKey(t))
	kv, err := s.Get(ctx, Prefix+"a/old")
	if err != nil || string(kv.Value) != "plain-old" {
		t.Fatalf("plaintext from before encryption: %q %v", kv.Value, err)
	}
	n, err := s.EncryptExisting(ctx)
	if err != nil || n != 1 {
		t.Fatalf("EncryptExisting = %d, %v; want 1", n, err)
	}
	raw, _ := bs.Get(ctx, Prefix+"a/old")
	if !bytes.HasPrefix(raw.Value, magic) {
		t.Error("the old secret is still plaintext")
	}
	if n, _ := s.EncryptExisting(ctx); n != 0 {
		t.Errorf("second pass rewrote %d", n)
	}
}

func TestKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pki", KeyFile)
	k1, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	k2, err := LoadOrCreateKey(path)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("second load gave another key (%v)", err)
	}
	if err := os.WriteFile(path, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(path); err == nil {
		t.Error("a damaged key file was accepted")
	}
}
