package localstore

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"flotilla.dev/flotilla/internal/atomicfile"
)

// Sentinel errors, checked with errors.Is. The errors that wrap them say
// which file and what to do.
var (
	ErrLocked  = errors.New("state.db is in use by another flotilla-agent; stop it first or give this one another data directory")
	ErrCorrupt = errors.New("local state file is corrupt")
	ErrKey     = errors.New("secrets key does not fit the local state")
)

// Defaults for the zero Options.
const (
	DefaultTimeout = 2 * time.Second
	DefaultKeyFile = "localstore.key"
)

// Options tune Open; the zero value is the production default.
type Options struct {
	// KeyFile holds the 32-byte secrets key. "" means DefaultKeyFile in
	// the directory of the database.
	KeyFile string
	// Timeout is how long Open waits for another process to release the
	// file. 0 or less means DefaultTimeout.
	Timeout time.Duration
}

func (o Options) withDefaults(path string) Options {
	if o.KeyFile == "" {
		o.KeyFile = filepath.Join(filepath.Dir(path), DefaultKeyFile)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return o
}

// Kind names a bucket of hub objects.
type Kind string

// The kinds the agent keeps.
const (
	Pods           Kind = "pods"
	ConfigMaps     Kind = "configmaps"
	Secrets        Kind = "secrets"
	Services       Kind = "services"
	EndpointSlices Kind = "endpointslices"
	Nodes          Kind = "nodes"
)

var kinds = []Kind{Pods, ConfigMaps, Secrets, Services, EndpointSlices, Nodes}

func (k Kind) valid() bool { return slices.Contains(kinds, k) }

func (k Kind) namespaced() bool { return k != Nodes }

// Object is what the typed functions store: a pointer to one of the API
// types named by a Kind, such as *corev1.Pod.
type Object interface {
	runtime.Object
	metav1.Object
}

// kindOf tells which Kind a Go type belongs to. The typed functions check
// it so that, say, a Secret handed in as a ConfigMap is never stored in
// plaintext.
func kindOf(obj any) (kind Kind, isNil bool) {
	switch v := obj.(type) {
	case *corev1.Pod:
		return Pods, v == nil
	case *corev1.ConfigMap:
		return ConfigMaps, v == nil
	case *corev1.Secret:
		return Secrets, v == nil
	case *corev1.Service:
		return Services, v == nil
	case *discoveryv1.EndpointSlice:
		return EndpointSlices, v == nil
	case *corev1.Node:
		return Nodes, v == nil
	}
	return "", false
}

func checkKind(kind Kind, obj any) error {
	if !kind.valid() {
		return fmt.Errorf("unknown kind %q", kind)
	}
	if got, _ := kindOf(obj); got != kind {
		return fmt.Errorf("a %T does not belong in %s", obj, kind)
	}
	return nil
}

var (
	factsBucket = []byte("facts")
	metaBucket  = []byte("meta")

	metaSchema = []byte("schema")
)

// schemaVersion is bumped when the layout changes in a way an older agent
// would misread.
const schemaVersion = "1"

func rvKey(kind Kind) []byte { return []byte("rv/" + string(kind)) }

func allBuckets() [][]byte {
	names := [][]byte{factsBucket, metaBucket}
	for _, k := range kinds {
		names = append(names, []byte(k))
	}
	return names
}

// Store is the device's local state. It is safe for concurrent use.
type Store struct {
	db       *bolt.DB
	path     string
	keyFile  string
	readOnly bool
	// aead seals Secrets; nil only in a read-only store whose key file is
	// missing, where reading a Secret is then an error.
	aead cipher.AEAD
}

// Open opens the state file at path for the agent, creating it (and its
// directory, and the key file) when missing. It fails with ErrLocked when
// another process holds the file for longer than opts.Timeout, and with
// ErrCorrupt when the file is not a readable state file; it never deletes
// or rewrites such a file.
func Open(path string, opts Options) (*Store, error) {
	opts = opts.withDefaults(path)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("localstore: open %s: %w", path, err)
	}
	return open(path, opts, false)
}

// OpenReadOnly opens an existing state file for reading, for tools that
// inspect a device while no agent runs: a running agent holds the file and
// this fails with ErrLocked. It writes nothing, not even a missing key
// file; without the key, reading a Secret fails with ErrKey.
func OpenReadOnly(path string, opts Options) (*Store, error) {
	return open(path, opts.withDefaults(path), true)
}

func open(path string, opts Options, readOnly bool) (*Store, error) {
	if !readOnly {
		if err := verify(path, opts.Timeout); err != nil {
			return nil, err
		}
	}
	db, err := openBolt(path, opts.Timeout, readOnly)
	if err != nil {
		return nil, err
	}
	if readOnly {
		if err := walk(path, db); err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	s := &Store{db: db, path: path, keyFile: opts.KeyFile, readOnly: readOnly}
	if err := s.init(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// openBolt opens the bbolt file and sorts its failures into ErrLocked,
// ErrCorrupt and the rest.
func openBolt(path string, timeout time.Duration, readOnly bool) (db *bolt.DB, err error) {
	var file *os.File
	bo := &bolt.Options{
		Timeout: timeout,
		// Safe: bbolt rebuilds the freelist from the pages on open; not
		// writing it makes each of the many small commits cheaper.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		ReadOnly:       readOnly,
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, perm)
			file = f
			return f, err
		},
	}
	// bbolt panics on some damaged pages (rebuilding the freelist walks
	// every page). Recovering turns that into ErrCorrupt; closing the file
	// releases the lock bbolt already took, so a fixed file can be retried.
	defer func() {
		if r := recover(); r != nil {
			if file != nil {
				_ = file.Close()
			}
			db, err = nil, corruptError(path, fmt.Errorf("bbolt: %v", r))
		}
	}()
	db, err = bolt.Open(path, 0o600, bo)
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("localstore: open %s: %w (waited %s for its lock)", path, ErrLocked, timeout)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch):
		return nil, corruptError(path, err)
	case readOnly && errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("localstore: open %s: no local state (has the agent run with this data directory?): %w", path, err)
	default:
		return nil, fmt.Errorf("localstore: open %s: %w", path, err)
	}
}

// verify walks every page of an existing file through a read-only handle
// before the file is opened for writing. A writable open makes bbolt
// rebuild its freelist by walking the pages in a goroutine of its own,
// where a damaged page panics beyond any recover: the agent would
// crash-loop on every start instead of saying which file is bad.
func verify(path string, timeout time.Duration) error {
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		return nil // missing or new: the writable open reports or creates it
	}
	db, err := openBolt(path, timeout, true)
	if err != nil {
		return err
	}
	defer db.Close()
	return walk(path, db)
}

// walk visits every bucket and key, which touches every branch and leaf
// page, in this goroutine so that a damaged page becomes ErrCorrupt.
func walk(path string, db *bolt.DB) (err error) {
	// A page id past the end of the file points outside the mapping: make
	// that fault a panic that recover sees.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = corruptError(path, fmt.Errorf("bbolt: %v", r))
		}
	}()
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bolt.Bucket) error { return walkBucket(b) })
	})
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return corruptError(path, err)
	}
	return err
}

func walkBucket(b *bolt.Bucket) error {
	return b.ForEach(func(k, v []byte) error {
		if v != nil {
			return nil
		}
		if sub := b.Bucket(k); sub != nil {
			return walkBucket(sub)
		}
		return nil
	})
}

func corruptError(path string, cause error) error {
	return fmt.Errorf("localstore: %s: %w (%w); move it away (mv %s %s.corrupt) and start the agent again: it rebuilds the file from the hub",
		path, ErrCorrupt, cause, path, path)
}

// init checks the layout, creates what a new file lacks and loads the key.
func (s *Store) init() error {
	fresh, err := s.checkLayout()
	if err != nil {
		return err
	}
	if fresh && !s.readOnly {
		if err := s.createLayout(); err != nil {
			return err
		}
	}
	return s.loadKey()
}

// checkLayout reports whether the file lacks buckets or the schema mark,
// as a new file does; a schema this agent does not know is an error.
func (s *Store) checkLayout() (fresh bool, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		for _, name := range allBuckets() {
			if tx.Bucket(name) == nil {
				fresh = true
			}
		}
		meta := tx.Bucket(metaBucket)
		if meta == nil {
			return nil
		}
		switch v := meta.Get(metaSchema); {
		case v == nil:
			fresh = true
		case string(v) != schemaVersion:
			return fmt.Errorf("schema %q is not the supported %q (written by a newer flotilla-agent?)", v, schemaVersion)
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrCorrupt) {
		err = corruptError(s.path, err)
	}
	return fresh, err
}

func (s *Store) createLayout() error {
	err := s.update(func(tx *bolt.Tx) (bool, error) {
		for _, name := range allBuckets() {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return false, fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		return true, tx.Bucket(metaBucket).Put(metaSchema, []byte(schemaVersion))
	})
	if err != nil {
		return fmt.Errorf("localstore: initialise %s: %w", s.path, err)
	}
	return nil
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Close closes the file and releases its lock. Closing twice is harmless.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("localstore: close %s: %w", s.path, err)
	}
	return nil
}

// --- transactions ---

// view runs fn in a read transaction. bbolt panics on some damaged pages,
// and a page past the end of the file faults; both become ErrCorrupt
// rather than a crashed agent.
func (s *Store) view(fn func(tx *bolt.Tx) error) (err error) {
	tx, err := s.db.Begin(false)
	if err != nil {
		return err
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = corruptError(s.path, fmt.Errorf("bbolt: %v", r))
		}
		_ = tx.Rollback()
	}()
	return fn(tx)
}

// update runs fn in a write transaction and commits only when fn reports a
// change: an empty commit still rewrites a meta page and syncs, which on a
// device's flash is wear for nothing.
func (s *Store) update(fn func(tx *bolt.Tx) (changed bool, err error)) (err error) {
	if s.readOnly {
		return fmt.Errorf("opened read-only: %w", berrors.ErrDatabaseReadOnly)
	}
	tx, err := s.db.Begin(true)
	if err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			err = corruptError(s.path, fmt.Errorf("bbolt: %v", r))
		}
		_ = tx.Rollback() // a no-op after Commit
	}()
	changed, err := fn(tx)
	if err != nil || !changed {
		return err
	}
	return tx.Commit()
}

// fail says what failed, on which object and file.
func (s *Store) fail(op string, kind Kind, key string, err error) error {
	if key == "" {
		return fmt.Errorf("localstore: %s %s in %s: %w", op, kind, s.path, err)
	}
	return fmt.Errorf("localstore: %s %s %s in %s: %w", op, kind, key, s.path, err)
}

// --- keys and values ---

func objectKey(kind Kind, namespace, name string) (string, error) {
	switch {
	case name == "":
		return "", errors.New("object has no name")
	case !kind.namespaced():
		return name, nil
	case namespace == "":
		return "", fmt.Errorf("%s %q has no namespace", kind, name)
	}
	return namespace + "/" + name, nil
}

// encodeObject checks obj against kind and returns its key and JSON.
func encodeObject(kind Kind, obj Object) (key string, plain []byte, err error) {
	got, isNil := kindOf(obj)
	switch {
	case got == "":
		return "", nil, checkKind(kind, obj)
	case isNil:
		return "", nil, errors.New("nil object")
	}
	// The key first, so that even a misfiled object's error names it.
	key, err = objectKey(kind, obj.GetNamespace(), obj.GetName())
	if err == nil {
		err = checkKind(kind, obj)
	}
	if err != nil {
		return key, nil, err
	}
	plain, err = json.Marshal(obj)
	if err != nil {
		return key, nil, fmt.Errorf("encode: %w", err)
	}
	return key, plain, nil
}

// sealed turns an object's JSON into what is stored under key.
func (s *Store) sealed(kind Kind, key string, plain []byte) ([]byte, error) {
	if kind != Secrets {
		return plain, nil
	}
	return s.seal(key, plain)
}

// opened turns a stored value back into the object's JSON. For kinds other
// than Secrets it returns v itself, valid only inside the transaction.
func (s *Store) opened(kind Kind, key string, v []byte) ([]byte, error) {
	if kind != Secrets {
		return v, nil
	}
	return s.unseal(key, v)
}

// putIfChanged stores plain under key unless the bucket already holds the
// same content, and reports whether it wrote. Sealed values differ on
// every write (random nonce), so Secrets are compared opened.
func (s *Store) putIfChanged(b *bolt.Bucket, kind Kind, key string, plain []byte) (bool, error) {
	if old := b.Get([]byte(key)); old != nil {
		// A value that no longer opens is simply replaced: the new one
		// supersedes it.
		if cur, err := s.opened(kind, key, old); err == nil && bytes.Equal(cur, plain) {
			return false, nil
		}
	}
	v, err := s.sealed(kind, key, plain)
	if err != nil {
		return false, err
	}
	return true, b.Put([]byte(key), v)
}

func bucket(tx *bolt.Tx, kind Kind) (*bolt.Bucket, error) {
	b := tx.Bucket([]byte(kind))
	if b == nil && tx.Writable() {
		return nil, fmt.Errorf("bucket %s missing", kind)
	}
	return b, nil // a read-only store may predate a bucket: it is empty
}

// --- typed objects ---

// Put stores obj under kind, keyed by its namespace and name. Storing what
// is already there writes nothing.
func Put[T Object](s *Store, kind Kind, obj T) error {
	key, plain, err := encodeObject(kind, obj)
	if err != nil {
		return s.fail("put", kind, key, err)
	}
	err = s.update(func(tx *bolt.Tx) (bool, error) {
		b, err := bucket(tx, kind)
		if err != nil {
			return false, err
		}
		return s.putIfChanged(b, kind, key, plain)
	})
	if err != nil {
		return s.fail("put", kind, key, err)
	}
	return nil
}

// Get returns the object stored under kind at namespace/name (namespace is
// ignored for Nodes), and whether there was one.
func Get[T any, PT interface {
	*T
	Object
}](s *Store, kind Kind, namespace, name string) (PT, bool, error) {
	key, err := objectKey(kind, namespace, name)
	if err == nil {
		err = checkKind(kind, PT(nil))
	}
	if err != nil {
		return nil, false, s.fail("get", kind, key, err)
	}
	var obj PT
	err = s.view(func(tx *bolt.Tx) error {
		b, err := bucket(tx, kind)
		if b == nil || err != nil {
			return err
		}
		v := b.Get([]byte(key))
		if v == nil {
			return nil
		}
		obj, err = decode[T, PT](s, kind, key, v)
		return err
	})
	if err != nil {
		return nil, false, s.fail("get", kind, key, err)
	}
	return obj, obj != nil, nil
}

// List returns every object stored under kind, ordered by key. A value
// that does not decode does not hide the others: List returns those it
// could decode together with an error naming each one that failed.
func List[T any, PT interface {
	*T
	Object
}](s *Store, kind Kind) ([]PT, error) {
	if err := checkKind(kind, PT(nil)); err != nil {
		return nil, s.fail("list", kind, "", err)
	}
	var (
		objs []PT
		errs []error
	)
	err := s.view(func(tx *bolt.Tx) error {
		b, err := bucket(tx, kind)
		if b == nil || err != nil {
			return err
		}
		return b.ForEach(func(k, v []byte) error {
			obj, err := decode[T, PT](s, kind, string(k), v)
			if err != nil {
				errs = append(errs, s.fail("list", kind, string(k), err))
				return nil
			}
			objs = append(objs, obj)
			return nil
		})
	})
	if err != nil {
		return nil, s.fail("list", kind, "", err)
	}
	return objs, errors.Join(errs...)
}

// decode opens and unmarshals one stored value. It runs inside the
// transaction: json.Unmarshal copies out of v, which bbolt owns.
func decode[T any, PT interface {
	*T
	Object
}](s *Store, kind Kind, key string, v []byte) (PT, error) {
	plain, err := s.opened(kind, key, v)
	if err != nil {
		return nil, err
	}
	obj := PT(new(T))
	if err := json.Unmarshal(plain, obj); err != nil {
		return nil, fmt.Errorf("%w: stored value does not decode: %w", ErrCorrupt, err)
	}
	return obj, nil
}

// Delete removes the object under kind at namespace/name (namespace is
// ignored for Nodes). Deleting what is not there writes nothing.
func (s *Store) Delete(kind Kind, namespace, name string) error {
	key, err := objectKey(kind, namespace, name)
	if err == nil && !kind.valid() {
		err = fmt.Errorf("unknown kind %q", kind)
	}
	if err != nil {
		return s.fail("delete", kind, key, err)
	}
	err = s.update(func(tx *bolt.Tx) (bool, error) {
		b, err := bucket(tx, kind)
		if err != nil || b.Get([]byte(key)) == nil {
			return false, err
		}
		return true, b.Delete([]byte(key))
	})
	if err != nil {
		return s.fail("delete", kind, key, err)
	}
	return nil
}

// Replace makes kind hold exactly objs, as after a re-list, and records the
// list's resourceVersion, in one transaction: a crash leaves either the old
// state or the new one.
func Replace[T Object](s *Store, kind Kind, objs []T, resourceVersion string) error {
	want := make(map[string][]byte, len(objs))
	for _, obj := range objs {
		key, plain, err := encodeObject(kind, obj)
		if err != nil {
			return s.fail("replace", kind, key, err)
		}
		want[key] = plain
	}
	err := s.update(func(tx *bolt.Tx) (bool, error) {
		b, err := bucket(tx, kind)
		if err != nil {
			return false, err
		}
		changed, err := deleteExcept(b, want)
		if err != nil {
			return false, err
		}
		for _, key := range slices.Sorted(maps.Keys(want)) {
			wrote, err := s.putIfChanged(b, kind, key, want[key])
			if err != nil {
				return false, fmt.Errorf("%s: %w", key, err)
			}
			changed = changed || wrote
		}
		wrote, err := setResourceVersion(tx, kind, resourceVersion)
		return changed || wrote, err
	})
	if err != nil {
		return s.fail("replace", kind, "", err)
	}
	return nil
}

// deleteExcept removes every key of b not in keep. Keys are collected
// first: deleting under a bbolt cursor can skip the next key.
func deleteExcept(b *bolt.Bucket, keep map[string][]byte) (bool, error) {
	var stale [][]byte
	err := b.ForEach(func(k, _ []byte) error {
		if _, ok := keep[string(k)]; !ok {
			stale = append(stale, bytes.Clone(k))
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	for _, k := range stale {
		if err := b.Delete(k); err != nil {
			return false, fmt.Errorf("%s: %w", k, err)
		}
	}
	return len(stale) > 0, nil
}

// ResourceVersion is the last list or watch resourceVersion recorded for
// kind, "" if none.
func (s *Store) ResourceVersion(kind Kind) (string, error) {
	if !kind.valid() {
		return "", s.fail("read resourceVersion of", kind, "", errors.New("unknown kind"))
	}
	var rv string
	err := s.view(func(tx *bolt.Tx) error {
		if meta := tx.Bucket(metaBucket); meta != nil {
			rv = string(meta.Get(rvKey(kind)))
		}
		return nil
	})
	if err != nil {
		return "", s.fail("read resourceVersion of", kind, "", err)
	}
	return rv, nil
}

// SetResourceVersion records rv as the last list or watch resourceVersion
// for kind; "" forgets it.
func (s *Store) SetResourceVersion(kind Kind, rv string) error {
	if !kind.valid() {
		return s.fail("record resourceVersion of", kind, "", errors.New("unknown kind"))
	}
	err := s.update(func(tx *bolt.Tx) (bool, error) {
		return setResourceVersion(tx, kind, rv)
	})
	if err != nil {
		return s.fail("record resourceVersion of", kind, "", err)
	}
	return nil
}

func setResourceVersion(tx *bolt.Tx, kind Kind, rv string) (bool, error) {
	return putString(tx.Bucket(metaBucket), rvKey(kind), rv)
}

// putString stores v under k, deleting k for "", and reports whether that
// changed anything.
func putString(b *bolt.Bucket, k []byte, v string) (bool, error) {
	old := b.Get(k)
	switch {
	case v == "" && old == nil, old != nil && string(old) == v:
		return false, nil
	case v == "":
		return true, b.Delete(k)
	}
	return true, b.Put(k, []byte(v))
}

// --- pod records ---

// SetFact records an agent fact such as the node name or pod CIDR; ""
// forgets it.
func (s *Store) SetFact(key, value string) error {
	if key == "" {
		return fmt.Errorf("localstore: set fact in %s: empty key", s.path)
	}
	err := s.update(func(tx *bolt.Tx) (bool, error) {
		return putString(tx.Bucket(factsBucket), []byte(key), value)
	})
	if err != nil {
		return fmt.Errorf("localstore: set fact %q in %s: %w", key, s.path, err)
	}
	return nil
}

// Fact returns the fact recorded under key, "" if none.
func (s *Store) Fact(key string) (string, error) {
	var value string
	err := s.view(func(tx *bolt.Tx) error {
		if b := tx.Bucket(factsBucket); b != nil && key != "" {
			value = string(b.Get([]byte(key)))
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("localstore: read fact %q in %s: %w", key, s.path, err)
	}
	return value, nil
}

// --- secrets key and sealing ---

const keySize = 32 // AES-256

// sealFormat leads every sealed value so that a later key rotation or
// cipher change can tell old values from new.
const sealFormat byte = 1

// loadKey reads the key file, creating it when missing unless that would
// orphan Secrets already stored, and checks that it opens them.
func (s *Store) loadKey() error {
	key, err := readKey(s.keyFile)
	switch {
	case err == nil && !s.readOnly:
		if err := tightenMode(s.keyFile); err != nil {
			return err
		}
	case err == nil:
	case !errors.Is(err, fs.ErrNotExist):
		return err
	case s.readOnly:
		return nil // reading a Secret will say the key is missing
	default:
		if n, err := s.count(Secrets); err != nil || n > 0 {
			if err != nil {
				return err
			}
			return fmt.Errorf("localstore: key file %s is missing but %s holds %d sealed Secrets: %w; restore the key, or move %s away so the agent rebuilds it from the hub",
				s.keyFile, s.path, n, ErrKey, s.path)
		}
		if key, err = createKey(s.keyFile); err != nil {
			return err
		}
	}
	if s.aead, err = newAEAD(key); err != nil {
		return fmt.Errorf("localstore: key file %s: %w", s.keyFile, err)
	}
	return s.checkKey()
}

// checkKey opens one stored Secret, so a key from another device (or a
// restored old one) fails at open rather than at the first Secret read.
func (s *Store) checkKey() error {
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(Secrets))
		if b == nil {
			return nil
		}
		k, v := b.Cursor().First()
		if k == nil {
			return nil
		}
		// Only a failure to authenticate says the key is wrong; a malformed
		// value is that Secret's problem and surfaces when it is read.
		if _, err := s.unseal(string(k), v); errors.Is(err, ErrKey) {
			return err
		}
		return nil
	})
	if errors.Is(err, ErrKey) {
		return fmt.Errorf("localstore: key file %s does not open the Secrets in %s: %w; restore the key this file was written with, or move %s away so the agent rebuilds it from the hub",
			s.keyFile, s.path, ErrKey, s.path)
	}
	if err != nil {
		return fmt.Errorf("localstore: check key file %s against %s: %w", s.keyFile, s.path, err)
	}
	return nil
}

func (s *Store) count(kind Kind) (int, error) {
	n := 0
	err := s.view(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte(kind)); b != nil {
			n = b.Stats().KeyN
		}
		return nil
	})
	if err != nil {
		return 0, s.fail("count", kind, "", err)
	}
	return n, nil
}

func readKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("localstore: read key file %s: %w", path, err)
	}
	defer f.Close()
	// One byte more than a key is enough to tell a wrong file, however big.
	key, err := io.ReadAll(io.LimitReader(f, keySize+1))
	if err != nil {
		return nil, fmt.Errorf("localstore: read key file %s: %w", path, err)
	}
	if len(key) != keySize {
		size := fmt.Sprint(len(key))
		if len(key) > keySize {
			size = "more than " + fmt.Sprint(keySize)
		}
		return nil, fmt.Errorf("localstore: key file %s holds %s bytes, not a %d-byte key: %w; restore the original key, or move it and the state file beside it away so the agent starts afresh",
			path, size, keySize, ErrKey)
	}
	return key, nil
}

// tightenMode makes a key file that someone loosened readable by its owner
// only again.
func tightenMode(path string) error {
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm()&0o077 == 0 {
		return err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("localstore: tighten the mode of key file %s: %w", path, err)
	}
	return nil
}

// createKey writes a new random key atomically: a crash leaves either no
// key file or a whole one, never a short key that would lock out every
// Secret written after it.
func createKey(path string) ([]byte, error) {
	key := make([]byte, keySize)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	if err := atomicfile.Write(path, key, 0o600); err != nil {
		return nil, fmt.Errorf("localstore: create key file %s: %w", path, err)
	}
	return key, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// secretAAD binds a sealed value to its key, so a value copied under
// another Secret's name does not open.
func secretAAD(key string) []byte {
	return []byte("flotilla/localstore/secrets/" + key)
}

// seal returns sealFormat, a random nonce and the ciphertext of plain.
func (s *Store) seal(key string, plain []byte) ([]byte, error) {
	if s.aead == nil {
		return nil, fmt.Errorf("key file %s is missing: %w", s.keyFile, ErrKey)
	}
	ns := s.aead.NonceSize()
	out := make([]byte, 1+ns, 1+ns+len(plain)+s.aead.Overhead())
	out[0] = sealFormat
	_, _ = rand.Read(out[1:])
	return s.aead.Seal(out, out[1:], plain, secretAAD(key)), nil
}

// unseal reverses seal. A value that does not open is ErrKey: the usual
// cause is a key from elsewhere, which checkKey reports at open.
func (s *Store) unseal(key string, v []byte) ([]byte, error) {
	if s.aead == nil {
		return nil, fmt.Errorf("key file %s is missing: %w", s.keyFile, ErrKey)
	}
	ns := s.aead.NonceSize()
	if len(v) < 1+ns+s.aead.Overhead() || v[0] != sealFormat {
		return nil, fmt.Errorf("%w: sealed value is malformed", ErrCorrupt)
	}
	plain, err := s.aead.Open(nil, v[1:1+ns], v[1+ns:], secretAAD(key))
	if err != nil {
		return nil, fmt.Errorf("sealed value does not open with key file %s: %w", s.keyFile, ErrKey)
	}
	return plain, nil
}
