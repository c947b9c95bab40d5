package secrets

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"flotilla.dev/flotilla/hub/store"
)

// Prefix is the store key prefix of Secret objects (the API server keeps
// core/v1 Secrets under /core/secrets/<namespace>/<name>).
const Prefix = "/core/secrets/"

var magic = []byte("flotilla:aesgcm:v1:")

// ErrUndecryptable means a stored value cannot be opened with the key the
// hub has: the wrong secrets.key, or a damaged value.
var ErrUndecryptable = errors.New("stored secret cannot be decrypted")

// Store seals the values of keys under Prefix in the store it wraps.
type Store struct {
	store.Store
	aead   cipher.AEAD
	keyID  [4]byte
	prefix string
}

var _ store.Store = (*Store)(nil)

// Wrap returns a store that encrypts Secrets with key (32 bytes) in s.
func Wrap(s store.Store, key []byte) (*Store, error) {
	if len(key) != keySize {
		return nil, fmt.Errorf("secrets: key is %d bytes, want %d", len(key), keySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	return &Store{Store: s, aead: aead, keyID: keyID(key), prefix: Prefix}, nil
}

func (s *Store) encrypted(key string) bool { return strings.HasPrefix(key, s.prefix) }

func (s *Store) seal(key string, value []byte) ([]byte, error) {
	if !s.encrypted(key) {
		return value, nil
	}
	ns := s.aead.NonceSize()
	out := make([]byte, 0, len(magic)+len(s.keyID)+ns+len(value)+s.aead.Overhead())
	out = append(out, magic...)
	out = append(out, s.keyID[:]...)
	nonce := make([]byte, ns)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("secrets: nonce for %s: %w", key, err)
	}
	out = append(out, nonce...)
	return s.aead.Seal(out, nonce, value, []byte(key)), nil
}

func (s *Store) open(key string, value []byte) ([]byte, error) {
	if !s.encrypted(key) || value == nil || !bytes.HasPrefix(value, magic) {
		return value, nil
	}
	rest := value[len(magic):]
	ns := s.aead.NonceSize()
	if len(rest) < len(s.keyID)+ns+s.aead.Overhead() {
		return nil, fmt.Errorf("secrets: %s: %w: value too short", key, ErrUndecryptable)
	}
	if id := rest[:len(s.keyID)]; !bytes.Equal(id, s.keyID[:]) {
		return nil, fmt.Errorf("secrets: %s: %w: sealed with key id %s, but the hub's secrets.key has id %s; restore the key it was written with",
			key, ErrUndecryptable, hex.EncodeToString(id), hex.EncodeToString(s.keyID[:]))
	}
	rest = rest[len(s.keyID):]
	plain, err := s.aead.Open(nil, rest[:ns], rest[ns:], []byte(key))
	if err != nil {
		return nil, fmt.Errorf("secrets: %s: %w: %w", key, ErrUndecryptable, err)
	}
	return plain, nil
}

func (s *Store) openKV(kv store.KV) (store.KV, error) {
	v, err := s.open(kv.Key, kv.Value)
	if err != nil {
		return kv, err
	}
	kv.Value = v
	return kv, nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, key string) (store.KV, error) {
	kv, err := s.Store.Get(ctx, key)
	if err != nil {
		return kv, err
	}
	return s.openKV(kv)
}

// List implements store.Store.
func (s *Store) List(ctx context.Context, prefix string, rev int64) ([]store.KV, int64, error) {
	kvs, at, err := s.Store.List(ctx, prefix, rev)
	if err != nil {
		return nil, at, err
	}
	for i := range kvs {
		if kvs[i], err = s.openKV(kvs[i]); err != nil {
			return nil, at, err
		}
	}
	return kvs, at, nil
}

// Create implements store.Store.
func (s *Store) Create(ctx context.Context, key string, value []byte) (int64, error) {
	sealed, err := s.seal(key, value)
	if err != nil {
		return 0, err
	}
	return s.Store.Create(ctx, key, sealed)
}

// Update implements store.Store.
func (s *Store) Update(ctx context.Context, key string, value []byte, expectRev int64) (int64, error) {
	sealed, err := s.seal(key, value)
	if err != nil {
		return 0, err
	}
	return s.Store.Update(ctx, key, sealed, expectRev)
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, key string, expectRev int64) (store.KV, int64, error) {
	kv, rev, err := s.Store.Delete(ctx, key, expectRev)
	if err != nil {
		return kv, rev, err
	}
	kv, err = s.openKV(kv)
	return kv, rev, err
}

// Watch implements store.Store: events come out decrypted.
func (s *Store) Watch(ctx context.Context, prefix string, fromRev int64) (<-chan store.WatchResult, error) {
	in, err := s.Store.Watch(ctx, prefix, fromRev)
	if err != nil {
		return nil, err
	}
	out := make(chan store.WatchResult)
	go func() {
		defer close(out)
		for res := range in {
			if res.Err == nil {
				res = s.openResult(res)
			}
			select {
			case out <- res:
			case <-ctx.Done():
				// Drain so the inner watch can finish and close.
				for range in {
				}
				return
			}
			if res.Err != nil {
				for range in {
				}
				return
			}
		}
	}()
	return out, nil
}

func (s *Store) openResult(res store.WatchResult) store.WatchResult {
	evs := make([]store.Event, len(res.Events))
	for i, ev := range res.Events {
		var err error
		if ev.KV, err = s.openKV(ev.KV); err == nil {
			ev.PrevValue, err = s.open(ev.KV.Key, ev.PrevValue)
		}
		if err != nil {
			return store.WatchResult{Err: err}
		}
		evs[i] = ev
	}
	res.Events = evs
	return res
}

// EncryptExisting seals every Secret still stored in plaintext (written
// before encryption was on) and returns how many it rewrote. Each rewrite
// is a compare-and-swap, so a concurrent writer is never overwritten.
func (s *Store) EncryptExisting(ctx context.Context) (int, error) {
	kvs, _, err := s.Store.List(ctx, s.prefix, 0)
	if err != nil {
		return 0, fmt.Errorf("secrets: list stored secrets: %w", err)
	}
	n := 0
	for _, kv := range kvs {
		if bytes.HasPrefix(kv.Value, magic) {
			continue
		}
		if _, err := s.Update(ctx, kv.Key, kv.Value, kv.ModRevision); err != nil {
			if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
				continue // rewritten (and so sealed) or deleted meanwhile
			}
			return n, fmt.Errorf("secrets: encrypt %s: %w", kv.Key, err)
		}
		n++
	}
	return n, nil
}
