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
// hub has: the wrong secrets.key, or a damaged value. Errors of Get and
// Unreadable are *UndecryptableError, which wraps it.
var ErrUndecryptable = errors.New("stored secret cannot be decrypted")

// UndecryptableError says which Secret cannot be read, why, and what to do.
type UndecryptableError struct {
	// Key is the store key; Namespace and Name the Secret's.
	Key, Namespace, Name string
	// KeyFile is the key's file, as the message names it.
	KeyFile string
	// Detail says how the value fails to open.
	Detail string
	// Err is the cipher's error, if any.
	Err error
}

func (e *UndecryptableError) Error() string {
	what := e.Key
	if e.Name != "" {
		what = "Secret " + e.Namespace + "/" + e.Name
	}
	return fmt.Sprintf("%s: the stored value cannot be decrypted with %s (%s); restore the key it was written with, or delete the Secret",
		what, e.KeyFile, e.Detail)
}

func (e *UndecryptableError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrUndecryptable}
	}
	return []error{ErrUndecryptable, e.Err}
}

// Reason is the reason of the Event the API server writes about it.
func (e *UndecryptableError) Reason() string { return "DecryptionFailed" }

// DefaultKeyFile is how errors name the key when KeyFile is not set.
const DefaultKeyFile = "DATA_DIR/pki/" + KeyFile

// Store seals the values of keys under Prefix in the store it wraps.
//
// A value that does not open (sealed with another key, or damaged) fails
// Get, but not List or Watch: they hand it over as it is stored, sealed,
// so that one bad Secret does not hide every other object, and
// Unreadable says why it cannot be read. Delete removes such a value.
type Store struct {
	store.Store
	// KeyFile names the key's file in errors; DefaultKeyFile when empty.
	KeyFile string
	aead    cipher.AEAD
	keyID   [4]byte
	prefix  string
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
		return nil, s.undecryptable(key, "the value is cut short", nil)
	}
	if id := rest[:len(s.keyID)]; !bytes.Equal(id, s.keyID[:]) {
		return nil, s.undecryptable(key, fmt.Sprintf("it was sealed with key id %s, and this key has id %s",
			hex.EncodeToString(id), hex.EncodeToString(s.keyID[:])), nil)
	}
	rest = rest[len(s.keyID):]
	plain, err := s.aead.Open(nil, rest[:ns], rest[ns:], []byte(key))
	if err != nil {
		return nil, s.undecryptable(key, "the value is damaged, or was copied from another Secret: "+err.Error(), err)
	}
	return plain, nil
}

func (s *Store) undecryptable(key, detail string, err error) *UndecryptableError {
	e := &UndecryptableError{Key: key, KeyFile: s.KeyFile, Detail: detail, Err: err}
	if e.KeyFile == "" {
		e.KeyFile = DefaultKeyFile
	}
	if ns, name, ok := strings.Cut(strings.TrimPrefix(key, Prefix), "/"); ok && strings.HasPrefix(key, Prefix) && !strings.Contains(name, "/") {
		e.Namespace, e.Name = ns, name
	}
	return e
}

// Unreadable says why kv's value, as List or Watch handed it over (or as
// the wrapped store holds it), cannot be read: an *UndecryptableError, or
// nil when it can.
func (s *Store) Unreadable(kv store.KV) error {
	if _, err := s.open(kv.Key, kv.Value); err != nil {
		return err
	}
	return nil
}

// openTolerant opens value, or hands it over as it is when it does not
// open (Unreadable says why).
func (s *Store) openTolerant(key string, value []byte) []byte {
	if plain, err := s.open(key, value); err == nil {
		return plain
	}
	return value
}

func (s *Store) openKV(kv store.KV) (store.KV, error) {
	v, err := s.open(kv.Key, kv.Value)
	if err != nil {
		return kv, err
	}
	kv.Value = v
	return kv, nil
}

// Get implements store.Store. A value that does not open fails with an
// *UndecryptableError, returned with the KV as stored (sealed, with its
// revisions) so that the caller may still delete it at that revision.
func (s *Store) Get(ctx context.Context, key string) (store.KV, error) {
	kv, err := s.Store.Get(ctx, key)
	if err != nil {
		return kv, err
	}
	return s.openKV(kv)
}

// List implements store.Store. A value that does not open is handed over
// sealed (see Unreadable).
func (s *Store) List(ctx context.Context, prefix string, rev int64) ([]store.KV, int64, error) {
	kvs, at, err := s.Store.List(ctx, prefix, rev)
	if err != nil {
		return nil, at, err
	}
	for i := range kvs {
		kvs[i].Value = s.openTolerant(kvs[i].Key, kvs[i].Value)
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

// Delete implements store.Store; it removes a value that does not open too.
func (s *Store) Delete(ctx context.Context, key string, expectRev int64) (store.KV, int64, error) {
	kv, rev, err := s.Store.Delete(ctx, key, expectRev)
	if err != nil {
		return kv, rev, err
	}
	// The value is gone: one that does not open is handed over sealed.
	kv.Value = s.openTolerant(kv.Key, kv.Value)
	return kv, rev, nil
}

// Watch implements store.Store: events come out decrypted, and values
// that do not open come out sealed (see Unreadable) rather than ending the
// watch.
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
		ev.KV.Value = s.openTolerant(ev.KV.Key, ev.KV.Value)
		ev.PrevValue = s.openTolerant(ev.KV.Key, ev.PrevValue)
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
