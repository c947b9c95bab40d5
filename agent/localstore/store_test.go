package localstore

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const secretMarker = "hunter2-only-in-the-secret"

func dbPath(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "state.db")
}

func openAt(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// txID is the id of the last committed write transaction: it moves on
// every commit, and only on a commit.
func txID(t *testing.T, s *Store) int {
	t.Helper()
	var id int
	if err := s.db.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil }); err != nil {
		t.Fatal(err)
	}
	return id
}

func meta(ns, name, rv string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Namespace: ns, Name: name, ResourceVersion: rv,
		UID:    types.UID("uid-" + name),
		Labels: map[string]string{"app": name},
	}
}

func pod(name, rv string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: meta("default", name, rv),
		Spec: corev1.PodSpec{
			NodeName:   "edge-1",
			Containers: []corev1.Container{{Name: "main", Image: "registry.local/app:1", Args: []string{"--port", "80"}}},
		},
	}
}

func configMap(name, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: meta("default", name, rv), Data: map[string]string{"greeting": "hello-from-configmap"}}
}

func secret(name, rv string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: meta("default", name, rv),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"password": []byte(secretMarker)},
	}
}

func service(name, rv string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: meta("default", name, rv),
		Spec: corev1.ServiceSpec{
			ClusterIP: "10.96.0.10",
			Selector:  map[string]string{"app": name},
			Ports:     []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
}

func endpointSlice(name, rv string) *discoveryv1.EndpointSlice {
	ready := true
	port, pname := int32(8080), "http"
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  meta("default", name, rv),
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.42.0.7"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Port: &port}},
	}
}

func node(name, rv string) *corev1.Node {
	return &corev1.Node{ObjectMeta: meta("", name, rv), Spec: corev1.NodeSpec{PodCIDR: "10.42.3.0/24"}}
}

// roundTrip puts obj, reads it back by key and by List, deletes it and
// checks it is gone.
func roundTrip[T any, PT interface {
	*T
	Object
}](t *testing.T, s *Store, kind Kind, obj PT) {
	t.Helper()
	if err := Put(s, kind, obj); err != nil {
		t.Fatalf("Put: %v", err)
	}
	got, ok, err := Get[T, PT](s, kind, obj.GetNamespace(), obj.GetName())
	if err != nil || !ok {
		t.Fatalf("Get = %v, %v, %v", got, ok, err)
	}
	if !reflect.DeepEqual(got, obj) {
		t.Errorf("Get returned\n%+v\nwant\n%+v", got, obj)
	}
	if got.GetResourceVersion() != obj.GetResourceVersion() {
		t.Errorf("resourceVersion %q, want %q", got.GetResourceVersion(), obj.GetResourceVersion())
	}
	all, err := List[T, PT](s, kind)
	if err != nil || len(all) != 1 || !reflect.DeepEqual(all[0], obj) {
		t.Fatalf("List = %v, %v; want just the object", all, err)
	}
	if err := s.Delete(kind, obj.GetNamespace(), obj.GetName()); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if got, ok, err := Get[T, PT](s, kind, obj.GetNamespace(), obj.GetName()); err != nil || ok || got != nil {
		t.Fatalf("Get after Delete = %v, %v, %v; want nothing", got, ok, err)
	}
}

func TestRoundTripEachKind(t *testing.T) {
	s := openAt(t, dbPath(t))
	t.Run("Pod", func(t *testing.T) { roundTrip(t, s, Pods, pod("web", "11")) })
	t.Run("ConfigMap", func(t *testing.T) { roundTrip(t, s, ConfigMaps, configMap("cfg", "12")) })
	t.Run("Secret", func(t *testing.T) { roundTrip(t, s, Secrets, secret("creds", "13")) })
	t.Run("Service", func(t *testing.T) { roundTrip(t, s, Services, service("web", "14")) })
	t.Run("EndpointSlice", func(t *testing.T) { roundTrip(t, s, EndpointSlices, endpointSlice("web-abc", "15")) })
	t.Run("Node", func(t *testing.T) { roundTrip(t, s, Nodes, node("edge-1", "16")) })
}

func TestNodesAreKeyedByNameAlone(t *testing.T) {
	s := openAt(t, dbPath(t))
	if err := Put(s, Nodes, node("edge-1", "1")); err != nil {
		t.Fatal(err)
	}
	// The namespace is ignored for a cluster-scoped kind.
	if _, ok, err := Get[corev1.Node](s, Nodes, "whatever", "edge-1"); err != nil || !ok {
		t.Fatalf("Get node = %v, %v", ok, err)
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte(Nodes)).Get([]byte("edge-1")) == nil {
			t.Error(`node not stored under "edge-1"`)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestWrongKindOrKeyIsRejected(t *testing.T) {
	s := openAt(t, dbPath(t))
	// A Secret put as a ConfigMap would be stored in plaintext.
	if err := Put(s, ConfigMaps, secret("creds", "1")); err == nil {
		t.Error("Put of a Secret into configmaps succeeded")
	}
	if cms, err := List[corev1.ConfigMap](s, ConfigMaps); err != nil || len(cms) != 0 {
		t.Errorf("configmaps = %v, %v; want empty", cms, err)
	}
	if _, _, err := Get[corev1.ConfigMap](s, Secrets, "default", "creds"); err == nil {
		t.Error("Get of a ConfigMap from secrets succeeded")
	}
	noNS := pod("web", "1")
	noNS.Namespace = ""
	if err := Put(s, Pods, noNS); err == nil {
		t.Error("Put of a pod without namespace succeeded")
	}
	if err := Put(s, Pods, (*corev1.Pod)(nil)); err == nil {
		t.Error("Put of a nil pod succeeded")
	}
	if err := s.Delete(Kind("widgets"), "default", "x"); err == nil {
		t.Error("Delete of an unknown kind succeeded")
	}
}

func TestErrorsNameObjectAndFile(t *testing.T) {
	path := dbPath(t)
	s := openAt(t, path)
	err := Put(s, ConfigMaps, secret("creds", "1"))
	if err == nil || !strings.Contains(err.Error(), "default/creds") || !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name default/creds and %s", err, path)
	}
}

func TestSecretIsSealedOnDisk(t *testing.T) {
	path := dbPath(t)
	s := openAt(t, path)
	if err := Put(s, Secrets, secret("creds", "1")); err != nil {
		t.Fatal(err)
	}
	if err := Put(s, ConfigMaps, configMap("cfg", "1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw := readFile(t, path)
	// Control: the reader sees plaintext values, so the file is the right one.
	if !bytes.Contains(raw, []byte("hello-from-configmap")) {
		t.Fatal("the config map's value is not in the file: the test reads the wrong file")
	}
	// Secret.Data is base64 in JSON; look for both spellings, and the name
	// of the key inside the Secret too.
	for _, needle := range []string{secretMarker, base64.StdEncoding.EncodeToString([]byte(secretMarker)), `"password"`} {
		if bytes.Contains(raw, []byte(needle)) {
			t.Errorf("state.db holds %q in plaintext", needle)
		}
	}
}

func TestSealedValueIsBoundToItsName(t *testing.T) {
	s := openAt(t, dbPath(t))
	if err := Put(s, Secrets, secret("a", "1")); err != nil {
		t.Fatal(err)
	}
	// Copy a's sealed bytes under b: it must not open as b.
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(Secrets))
		return b.Put([]byte("default/b"), bytes.Clone(b.Get([]byte("default/a"))))
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Get[corev1.Secret](s, Secrets, "default", "b"); !errors.Is(err, ErrKey) {
		t.Errorf("Get of a moved sealed value = %v, want ErrKey", err)
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	path := dbPath(t)
	s := openAt(t, path)
	want := secret("creds", "7")
	steps := []error{
		Put(s, Pods, pod("web", "5")),
		Put(s, Secrets, want),
		Put(s, Nodes, node("edge-1", "6")),
		s.SetResourceVersion(Pods, "99"),
		s.SetFact("podCIDR", "10.42.3.0/24"),
	}
	if err := errors.Join(steps...); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(filepath.Dir(path), DefaultKeyFile)
	key := readFile(t, keyPath)

	s = openAt(t, path)
	got, ok, err := Get[corev1.Secret](s, Secrets, "default", "creds")
	if err != nil || !ok || string(got.Data["password"]) != secretMarker || got.ResourceVersion != "7" {
		t.Fatalf("secret after reopen = %+v, %v, %v", got, ok, err)
	}
	if p, ok, err := Get[corev1.Pod](s, Pods, "default", "web"); err != nil || !ok || p.Spec.Containers[0].Image != "registry.local/app:1" {
		t.Errorf("pod after reopen = %v, %v, %v", p, ok, err)
	}
	if _, ok, err := Get[corev1.Node](s, Nodes, "", "edge-1"); err != nil || !ok {
		t.Errorf("node after reopen = %v, %v", ok, err)
	}
	if rv, err := s.ResourceVersion(Pods); err != nil || rv != "99" {
		t.Errorf("pods resourceVersion after reopen = %q, %v", rv, err)
	}
	if v, err := s.Fact("podCIDR"); err != nil || v != "10.42.3.0/24" {
		t.Errorf("fact after reopen = %q, %v", v, err)
	}
	if !bytes.Equal(readFile(t, keyPath), key) {
		t.Error("reopen replaced the key file")
	}
}

func TestKeyFileIsCreatedPrivate(t *testing.T) {
	path := dbPath(t)
	openAt(t, path)
	keyPath := filepath.Join(filepath.Dir(path), DefaultKeyFile)
	st, err := os.Stat(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 || st.Size() != keySize {
		t.Errorf("key file mode %v size %d, want 0600 and %d", st.Mode().Perm(), st.Size(), keySize)
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*")); len(m) != 0 {
		t.Errorf("temporary files left behind: %v", m)
	}
}

func TestCustomKeyFile(t *testing.T) {
	path := dbPath(t)
	keyPath := filepath.Join(t.TempDir(), "elsewhere.key")
	s, err := Open(path, Options{KeyFile: keyPath})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(keyPath); err != nil {
		t.Errorf("key not at Options.KeyFile: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(path), DefaultKeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a default key file was created too: %v", err)
	}
}

func TestWrongSizeKeyFile(t *testing.T) {
	for _, size := range []int{0, 16, 33, 4096} {
		path := dbPath(t)
		keyPath := filepath.Join(filepath.Dir(path), DefaultKeyFile)
		bad := bytes.Repeat([]byte{'k'}, size)
		if err := os.WriteFile(keyPath, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(path, Options{})
		if err == nil {
			s.Close()
			t.Fatalf("Open with a %d-byte key file succeeded", size)
		}
		if !errors.Is(err, ErrKey) || !strings.Contains(err.Error(), keyPath) {
			t.Errorf("%d-byte key: error %q is not ErrKey naming %s", size, err, keyPath)
		}
		if !bytes.Equal(readFile(t, keyPath), bad) {
			t.Errorf("%d-byte key file was rewritten", size)
		}
	}
}

func TestKeyThatDoesNotFitTheSecrets(t *testing.T) {
	path := dbPath(t)
	s := openAt(t, path)
	if err := Put(s, Secrets, secret("creds", "1")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	keyPath := filepath.Join(filepath.Dir(path), DefaultKeyFile)

	// Missing: a new key would orphan the stored Secret.
	if err := os.Remove(keyPath); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(path, Options{}); !errors.Is(err, ErrKey) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open without the key = %v, want ErrKey", err)
	}
	if _, err := os.Stat(keyPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open created a key that cannot open the stored Secret: %v", err)
	}

	// Another device's key.
	if err := os.WriteFile(keyPath, bytes.Repeat([]byte{1}, keySize), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(path, Options{}); !errors.Is(err, ErrKey) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open with a foreign key = %v, want ErrKey", err)
	}
}

func TestMissingKeyWithoutSecretsIsRecreated(t *testing.T) {
	path := dbPath(t)
	s := openAt(t, path)
	if err := Put(s, Pods, pod("web", "1")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	keyPath := filepath.Join(filepath.Dir(path), DefaultKeyFile)
	if err := os.Remove(keyPath); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path)
	if _, err := os.Stat(keyPath); err != nil {
		t.Errorf("key not recreated: %v", err)
	}
	if _, ok, err := Get[corev1.Pod](s, Pods, "default", "web"); err != nil || !ok {
		t.Errorf("pod after key recreation = %v, %v", ok, err)
	}
}

func TestLooseKeyModeIsTightened(t *testing.T) {
	path := dbPath(t)
	openAt(t, path).Close()
	keyPath := filepath.Join(filepath.Dir(path), DefaultKeyFile)
	if err := os.Chmod(keyPath, 0o644); err != nil {
		t.Fatal(err)
	}
	openAt(t, path)
	if st, err := os.Stat(keyPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key mode after reopen = %v, %v; want 0600", st.Mode().Perm(), err)
	}
}

func TestSecondOpenIsLocked(t *testing.T) {
	path := dbPath(t)
	first := openAt(t, path)

	const timeout = 200 * time.Millisecond
	start := time.Now()
	s, err := Open(path, Options{Timeout: timeout})
	elapsed := time.Since(start)
	if err == nil {
		s.Close()
		t.Fatal("second Open succeeded while the first holds the file")
	}
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Errorf("second Open error %q is not ErrLocked naming the file", err)
	}
	if elapsed > timeout+time.Second {
		t.Errorf("second Open took %v with a %v timeout", elapsed, timeout)
	}

	if s, err := OpenReadOnly(path, Options{Timeout: timeout}); !errors.Is(err, ErrLocked) {
		if s != nil {
			s.Close()
		}
		t.Errorf("OpenReadOnly while the agent runs = %v, want ErrLocked", err)
	}

	// The lock goes with the first store.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{Timeout: timeout})
	if err != nil {
		t.Fatalf("Open after the first closed: %v", err)
	}
	s.Close()
}

func TestGarbageFileIsCorruptAndKept(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	big := make([]byte, 64<<10)
	for i := range big {
		big[i] = byte(rng.UintN(256))
	}
	cases := map[string][]byte{
		"random 64KiB": big,
		"short text":   []byte("this is not a bbolt file\n"),
	}
	for name, garbage := range cases {
		t.Run(name, func(t *testing.T) {
			path := dbPath(t)
			if err := os.WriteFile(path, garbage, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, open := range []func(string, Options) (*Store, error){Open, OpenReadOnly} {
				s, err := open(path, Options{})
				if err == nil {
					s.Close()
					t.Fatal("opened a garbage file")
				}
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "move it away") {
					t.Errorf("error %q is not ErrCorrupt naming the file and the remedy", err)
				}
			}
			if !bytes.Equal(readFile(t, path), garbage) {
				t.Error("the garbage file was changed")
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(path), DefaultKeyFile)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a key file was created beside a corrupt state file: %v", err)
			}
		})
	}
}

// A file with valid meta pages but a damaged or missing data page: bbolt
// would panic on it in a goroutine of its own during a writable open, so
// this test crashes rather than fails if Open stops checking first.
func TestDamagedPagesAreCorruptAndKept(t *testing.T) {
	damage := map[string]func([]byte) []byte{
		"overwritten page": func(b []byte) []byte {
			for i := 2 * 4096; i < 3*4096; i++ {
				b[i] = byte(i * 7)
			}
			return b
		},
		"truncated": func(b []byte) []byte { return b[:3*4096] },
	}
	for name, spoil := range damage {
		t.Run(name, func(t *testing.T) {
			path := dbPath(t)
			s := openAt(t, path)
			for i := range 100 {
				if err := Put(s, Pods, pod(fmt.Sprint("p", i), "1")); err != nil {
					t.Fatal(err)
				}
			}
			s.Close()
			raw := readFile(t, path)
			if len(raw) < 8*4096 {
				t.Fatalf("file is %d bytes, too small to damage a data page", len(raw))
			}
			bad := spoil(raw)
			if err := os.WriteFile(path, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, open := range []func(string, Options) (*Store, error){Open, OpenReadOnly} {
				s, err := open(path, Options{})
				if err == nil {
					s.Close()
					t.Fatal("opened a damaged file")
				}
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
					t.Errorf("error %q is not ErrCorrupt naming the file", err)
				}
			}
			if !bytes.Equal(readFile(t, path), bad) {
				t.Error("the damaged file was changed")
			}
		})
	}
}

func TestNewerSchemaIsRefused(t *testing.T) {
	path := dbPath(t)
	s := openAt(t, path)
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(metaBucket).Put(metaSchema, []byte("99")) }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	before := readFile(t, path)
	if s, err := Open(path, Options{}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `"99"`) {
		if s != nil {
			s.Close()
		}
		t.Errorf("Open of a schema 99 file = %v, want ErrCorrupt naming the schema", err)
	}
	if !bytes.Equal(readFile(t, path), before) {
		t.Error("the file was changed")
	}
}

func TestReplace(t *testing.T) {
	s := openAt(t, dbPath(t))
	for _, name := range []string{"a", "b", "c"} {
		if err := Put(s, Secrets, secret(name, "1")); err != nil {
			t.Fatal(err)
		}
	}
	b2 := secret("b", "2")
	b2.Data["password"] = []byte("rotated")
	if err := Replace(s, Secrets, []*corev1.Secret{b2, secret("d", "3")}, "42"); err != nil {
		t.Fatal(err)
	}
	got, err := List[corev1.Secret](s, Secrets)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sec := range got {
		names = append(names, sec.Name+"@"+sec.ResourceVersion)
	}
	if strings.Join(names, ",") != "b@2,d@3" {
		t.Errorf("after Replace: %v, want [b@2 d@3]", names)
	}
	if string(got[0].Data["password"]) != "rotated" {
		t.Errorf("b not updated: %q", got[0].Data["password"])
	}
	if rv, err := s.ResourceVersion(Secrets); err != nil || rv != "42" {
		t.Errorf("resourceVersion after Replace = %q, %v; want 42", rv, err)
	}
	if rv, err := s.ResourceVersion(Pods); err != nil || rv != "" {
		t.Errorf("pods resourceVersion = %q, %v; want none", rv, err)
	}

	// Replacing with the same list and version commits nothing.
	id := txID(t, s)
	if err := Replace(s, Secrets, []*corev1.Secret{b2, secret("d", "3")}, "42"); err != nil {
		t.Fatal(err)
	}
	if txID(t, s) != id {
		t.Error("an unchanged Replace committed")
	}
	// An empty list empties the kind.
	if err := Replace(s, Secrets, []*corev1.Secret{}, "43"); err != nil {
		t.Fatal(err)
	}
	if got, err := List[corev1.Secret](s, Secrets); err != nil || len(got) != 0 {
		t.Errorf("after empty Replace: %v, %v", got, err)
	}
}

func TestReplaceRejectsABadObjectWhole(t *testing.T) {
	s := openAt(t, dbPath(t))
	if err := Put(s, Pods, pod("keep", "1")); err != nil {
		t.Fatal(err)
	}
	bad := pod("bad", "2")
	bad.Namespace = ""
	if err := Replace(s, Pods, []*corev1.Pod{pod("new", "2"), bad}, "2"); err == nil {
		t.Fatal("Replace with a pod without namespace succeeded")
	}
	got, err := List[corev1.Pod](s, Pods)
	if err != nil || len(got) != 1 || got[0].Name != "keep" {
		t.Errorf("pods after a failed Replace = %v, %v; want just keep", got, err)
	}
}

func TestIdenticalWritesCommitNothing(t *testing.T) {
	path := dbPath(t)
	s := openAt(t, path)
	p, sec := pod("web", "5"), secret("creds", "5")
	writes := []error{Put(s, Pods, p), Put(s, Secrets, sec), s.SetResourceVersion(Pods, "5"), s.SetFact("node", "edge-1")}
	if err := errors.Join(writes...); err != nil {
		t.Fatal(err)
	}
	id, before := txID(t, s), readFile(t, path)

	// Fresh copies, so equality comes from content, not from pointers.
	same := []error{
		Put(s, Pods, p.DeepCopy()),
		Put(s, Secrets, sec.DeepCopy()),
		s.SetResourceVersion(Pods, "5"),
		s.SetFact("node", "edge-1"),
		s.Delete(Pods, "default", "absent"),
	}
	if err := errors.Join(same...); err != nil {
		t.Fatal(err)
	}
	if got := txID(t, s); got != id {
		t.Errorf("identical writes committed: tx id %d -> %d", id, got)
	}
	if !bytes.Equal(readFile(t, path), before) {
		t.Error("identical writes changed the file")
	}

	// Control: a real change does commit, for a plain and a sealed kind.
	p.Labels["tier"] = "front"
	if err := Put(s, Pods, p); err != nil {
		t.Fatal(err)
	}
	if txID(t, s) == id {
		t.Error("a changed pod did not commit")
	}
	id = txID(t, s)
	sec.Data["password"] = []byte("changed")
	if err := Put(s, Secrets, sec); err != nil {
		t.Fatal(err)
	}
	if txID(t, s) == id {
		t.Error("a changed secret did not commit")
	}
}

func TestConcurrentWriters(t *testing.T) {
	s := openAt(t, dbPath(t))
	errs := make(chan error, 8)
	for w := range 8 {
		go func() {
			var err error
			for i := range 10 {
				err = errors.Join(err, Put(s, Pods, pod(fmt.Sprintf("w%d-%d", w, i), "1")))
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got, err := List[corev1.Pod](s, Pods); err != nil || len(got) != 80 {
		t.Errorf("List after concurrent Puts = %d pods, %v; want 80", len(got), err)
	}
}

func TestFacts(t *testing.T) {
	s := openAt(t, dbPath(t))
	if v, err := s.Fact("node"); err != nil || v != "" {
		t.Errorf("unset fact = %q, %v", v, err)
	}
	if err := s.SetFact("node", "edge-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetFact("podCIDR", "10.42.3.0/24"); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Fact("node"); err != nil || v != "edge-1" {
		t.Errorf("node = %q, %v", v, err)
	}
	if err := s.SetFact("node", ""); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Fact("node"); err != nil || v != "" {
		t.Errorf("cleared fact = %q, %v", v, err)
	}
	if v, err := s.Fact("podCIDR"); err != nil || v != "10.42.3.0/24" {
		t.Errorf("podCIDR = %q, %v", v, err)
	}
	if err := s.SetFact("", "x"); err == nil {
		t.Error("SetFact with an empty key succeeded")
	}
}

func TestListSkipsBadValueButSaysSo(t *testing.T) {
	s := openAt(t, dbPath(t))
	if err := errors.Join(Put(s, Pods, pod("a", "1")), Put(s, Pods, pod("c", "1"))); err != nil {
		t.Fatal(err)
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(Pods)).Put([]byte("default/b"), []byte("{not json"))
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := List[corev1.Pod](s, Pods)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "default/b") {
		t.Errorf("List error = %v, want ErrCorrupt naming default/b", err)
	}
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "c" {
		t.Errorf("List = %v, want a and c", got)
	}
}

func TestOpenReadOnly(t *testing.T) {
	path := dbPath(t)
	s := openAt(t, path)
	writes := []error{
		Put(s, Pods, pod("web", "5")),
		Put(s, Secrets, secret("creds", "6")),
		s.SetResourceVersion(Pods, "5"),
		s.SetFact("node", "edge-1"),
	}
	if err := errors.Join(writes...); err != nil {
		t.Fatal(err)
	}
	s.Close()
	before := readFile(t, path)

	ro, err := OpenReadOnly(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p, ok, err := Get[corev1.Pod](ro, Pods, "default", "web"); err != nil || !ok || p.ResourceVersion != "5" {
		t.Errorf("read-only pod = %v, %v, %v", p, ok, err)
	}
	if sec, ok, err := Get[corev1.Secret](ro, Secrets, "default", "creds"); err != nil || !ok || string(sec.Data["password"]) != secretMarker {
		t.Errorf("read-only secret = %v, %v, %v", sec, ok, err)
	}
	if rv, err := ro.ResourceVersion(Pods); err != nil || rv != "5" {
		t.Errorf("read-only resourceVersion = %q, %v", rv, err)
	}
	if v, err := ro.Fact("node"); err != nil || v != "edge-1" {
		t.Errorf("read-only fact = %q, %v", v, err)
	}
	if err := Put(ro, Pods, pod("other", "1")); err == nil {
		t.Error("Put on a read-only store succeeded")
	}
	// Two readers may share the file.
	ro2, err := OpenReadOnly(path, Options{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Errorf("second reader: %v", err)
	} else {
		ro2.Close()
	}
	ro.Close()
	if !bytes.Equal(readFile(t, path), before) {
		t.Error("a read-only session changed the file")
	}
}

func TestOpenReadOnlyWithoutKey(t *testing.T) {
	path := dbPath(t)
	s := openAt(t, path)
	if err := errors.Join(Put(s, Pods, pod("web", "1")), Put(s, Secrets, secret("creds", "1"))); err != nil {
		t.Fatal(err)
	}
	s.Close()
	keyPath := filepath.Join(filepath.Dir(path), DefaultKeyFile)
	if err := os.Remove(keyPath); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, ok, err := Get[corev1.Pod](ro, Pods, "default", "web"); err != nil || !ok {
		t.Errorf("pod without key = %v, %v", ok, err)
	}
	if _, _, err := Get[corev1.Secret](ro, Secrets, "default", "creds"); !errors.Is(err, ErrKey) {
		t.Errorf("secret without key = %v, want ErrKey", err)
	}
	if _, err := os.Stat(keyPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenReadOnly created a key file: %v", err)
	}
}

func TestOpenReadOnlyMissingFile(t *testing.T) {
	path := dbPath(t)
	if s, err := OpenReadOnly(path, Options{}); !errors.Is(err, os.ErrNotExist) {
		if s != nil {
			s.Close()
		}
		t.Errorf("OpenReadOnly of a missing file = %v, want ErrNotExist", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Error("OpenReadOnly created the file")
	}
}

// FuzzUnseal: whatever bytes sit in the secrets bucket, opening them
// returns an error rather than panicking, and only what seal produced opens.
func FuzzUnseal(f *testing.F) {
	s, err := Open(filepath.Join(f.TempDir(), "state.db"), Options{})
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	good, err := s.seal("default/x", []byte(`{"a":1}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{sealFormat})
	f.Add(append([]byte{2}, good[1:]...))
	f.Fuzz(func(t *testing.T, v []byte) {
		plain, err := s.unseal("default/x", v)
		if err == nil && (!bytes.Equal(v, good) || string(plain) != `{"a":1}`) {
			t.Errorf("forged value opened to %q", plain)
		}
		if err != nil && bytes.Equal(v, good) {
			t.Errorf("sealed value does not open: %v", err)
		}
	})
}
