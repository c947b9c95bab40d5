package boltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"flotilla.dev/flotilla/hub/store"
)

func TestEventRoundTrip(t *testing.T) {
	cases := []eventRecord{
		{Type: store.EventPut, Created: true, Key: "/pods/default/a", Value: []byte("v"), CreateRev: 7},
		{Type: store.EventPut, Key: "/k", Value: []byte{}, PrevValue: []byte("old"), CreateRev: 3, PrevModRev: 5},
		{Type: store.EventPut, Key: "/k", Value: []byte("new"), PrevValue: []byte{}, CreateRev: 3, PrevModRev: 5},
		{Type: store.EventDelete, Key: "/k", Value: []byte("gone"), PrevValue: []byte("gone"), CreateRev: 1, PrevModRev: 9},
	}
	for _, want := range cases {
		got, err := decodeEvent(encodeEvent(want))
		if err != nil {
			t.Fatalf("decode %+v: %v", want, err)
		}
		if got.Type != want.Type || got.Created != want.Created || got.Key != want.Key ||
			!bytes.Equal(got.Value, want.Value) || !bytes.Equal(got.PrevValue, want.PrevValue) ||
			(got.PrevValue == nil) != (want.PrevValue == nil) ||
			got.CreateRev != want.CreateRev || got.PrevModRev != want.PrevModRev {
			t.Fatalf("round trip of %+v gave %+v", want, got)
		}
	}
}

func TestDecodeCorrupt(t *testing.T) {
	good := encodeEvent(eventRecord{Type: store.EventPut, Created: true, Key: "/k", Value: []byte("v")})
	for _, raw := range [][]byte{nil, {2}, good[:eventHeader], good[:len(good)-1], append(append([]byte{}, good...), 'x')} {
		if _, err := decodeEvent(raw); !errors.Is(err, errCorrupt) {
			t.Errorf("decodeEvent(%q) = %v, want errCorrupt", raw, err)
		}
	}
	if _, _, _, err := decodeObject([]byte{1, 2}); !errors.Is(err, errCorrupt) {
		t.Errorf("decodeObject of a short record: %v", err)
	}
}

// FuzzDecodeEvent: a damaged file must give errors, never a panic.
func FuzzDecodeEvent(f *testing.F) {
	f.Add(encodeEvent(eventRecord{Type: store.EventPut, Created: true, Key: "/k", Value: []byte("v")}))
	f.Add(encodeEvent(eventRecord{Type: store.EventDelete, Key: "/k", Value: []byte("v")}))
	big := bytes.Repeat([]byte(`{"metadata":{"name":"a"}}`), 8)
	f.Add(encodeEvent(eventRecord{Type: store.EventPut, Key: "/k", Value: big, PrevValue: big[1:]}))
	f.Fuzz(func(t *testing.T, raw []byte) {
		e, err := decodeEvent(raw)
		if err != nil {
			return
		}
		again, err := decodeEvent(encodeEvent(e))
		if err != nil || again.Key != e.Key || !bytes.Equal(again.Value, e.Value) {
			t.Fatalf("re-encoding %+v gave %+v, %v", e, again, err)
		}
	})
}

// TestRecordsCompressed: an object and an update's event, each big enough
// to gain, are written compressed (an update's two versions of a Lease in
// little more than one) and read back as written; small ones stay plain.
func TestRecordsCompressed(t *testing.T) {
	lease := func(renew string) []byte {
		return []byte(`{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"sim-00042","namespace":"kube-node-lease",` +
			`"uid":"c22a2c2e-dbcd-4f69-8f3b-16704c3db511","creationTimestamp":"2026-12-03T20:09:23Z","managedFields":[{"manager":"flotilla-agent",` +
			`"operation":"Update","apiVersion":"coordination.k8s.io/v1","time":"` + renew + `","fieldsType":"FieldsV1",` +
			`"fieldsV1":{"f:spec":{"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:renewTime":{}}}}]},` +
			`"spec":{"holderIdentity":"sim-00042","leaseDurationSeconds":40,"renewTime":"` + renew + `"}}`)
	}
	cur, prev := lease("2026-12-03T20:12:04Z"), lease("2026-12-03T20:11:54Z")
	want := eventRecord{Type: store.EventPut, Key: "/coordination.k8s.io/leases/kube-node-lease/sim-00042",
		Value: cur, PrevValue: prev, CreateRev: 3, PrevModRev: 5}
	raw := encodeEvent(want)
	if raw[0] != formatZstd || len(raw) > len(cur) {
		t.Errorf("an update's event of %d + %d bytes: %d bytes of format %d, want compressed into less than one version", len(cur), len(prev), len(raw), raw[0])
	}
	key, err := eventKey(raw)
	if err != nil || string(key) != want.Key {
		t.Errorf("the key of a compressed event: %q, %v", key, err)
	}
	got, err := decodeEvent(raw)
	if err != nil || !bytes.Equal(got.Value, cur) || !bytes.Equal(got.PrevValue, prev) || got.Key != want.Key || got.PrevModRev != 5 {
		t.Fatalf("decoding the compressed event: %+v, %v", got, err)
	}
	if got = mustDecode(t, encodeEvent(eventRecord{Type: store.EventDelete, Key: want.Key, Value: cur})); !bytes.Equal(got.PrevValue, cur) {
		t.Errorf("a compressed delete's previous value: %q", got.PrevValue)
	}

	obj := encodeObject(3, 9, cur)
	if obj[0] != formatZstd || len(obj) >= len(cur) {
		t.Errorf("an object of %d bytes: %d bytes of format %d, want compressed", len(cur), len(obj), obj[0])
	}
	c, m, v, err := decodeObject(obj)
	if err != nil || c != 3 || m != 9 || !bytes.Equal(v, cur) {
		t.Errorf("decoding the compressed object: %d %d %q %v", c, m, v, err)
	}
	if small := encodeObject(1, 2, []byte(`{"a":1}`)); small[0] != formatPlain {
		t.Errorf("a small object was written in format %d, want plain", small[0])
	}

	// Damage inside the compressed values is found, not misread.
	bad := append([]byte{}, obj...)
	bad[len(bad)-3] ^= 0xff
	if _, _, _, err := decodeObject(bad); !errors.Is(err, errCorrupt) {
		t.Errorf("a damaged compressed object: %v, want errCorrupt", err)
	}
	bad = append([]byte{}, raw...)
	bad[len(bad)-3] ^= 0xff
	if _, err := decodeEvent(bad); !errors.Is(err, errCorrupt) {
		t.Errorf("a damaged compressed event: %v, want errCorrupt", err)
	}
}

func mustDecode(t *testing.T, raw []byte) eventRecord {
	t.Helper()
	e, err := decodeEvent(raw)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestOpensPlainFile: a file written before records were compressed (file
// format 1, plain records) opens, reads as it was written, takes
// compressed records from then on and says so in its format; a file of a
// format this hub does not know is refused, not misread.
func TestOpensPlainFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	value := func(i int) []byte {
		return bytes.Repeat([]byte(fmt.Sprintf(`{"metadata":{"name":"n%d"}}`, i)), 10)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	rev, err := s.Create(ctx, "/a", value(1))
	if err == nil {
		_, err = s.Update(ctx, "/a", value(2), rev)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Rewrite it as a hub before compression would have.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain := 0
	err = db.Update(func(tx *bolt.Tx) error {
		// Each record again, its values as they expand, under format 1.
		for _, b := range []struct {
			name   []byte
			values func(raw []byte) int // where the values start
		}{
			{objectsBucket, func([]byte) int { return objectHeader }},
			{eventsBucket, func(raw []byte) int {
				key, _ := eventKey(raw)
				return eventHeader + uvarintLen(len(key)) + len(key)
			}},
		} {
			bucket := tx.Bucket(b.name)
			old := map[string][]byte{}
			_ = bucket.ForEach(func(k, raw []byte) error {
				old[string(k)] = bytes.Clone(raw)
				return nil
			})
			for k, raw := range old {
				n := b.values(raw)
				values, err := recordValues(raw, n)
				if err != nil {
					return err
				}
				rec := append(append([]byte{formatPlain}, raw[1:n]...), values...)
				if err := bucket.Put([]byte(k), rec); err != nil {
					return err
				}
				plain++
			}
		}
		return tx.Bucket(metaBucket).Put(metaFormat, []byte{formatPlain})
	})
	if err == nil {
		err = db.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if plain != 3 {
		t.Fatalf("rewrote %d records as plain, want the object and its two events", plain)
	}

	s, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("opening a file of plain records: %v", err)
	}
	kv, err := s.Get(ctx, "/a")
	if err != nil || !bytes.Equal(kv.Value, value(2)) {
		t.Errorf("reading a plain object: %q, %v", kv.Value, err)
	}
	w, err := s.Watch(ctx, "/a", 0)
	if err != nil {
		t.Fatal(err)
	}
	var replayed []store.Event
	for len(replayed) < 2 {
		r := <-w
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		replayed = append(replayed, r.Events...)
	}
	if !bytes.Equal(replayed[0].KV.Value, value(1)) || !bytes.Equal(replayed[1].KV.Value, value(2)) || !bytes.Equal(replayed[1].PrevValue, value(1)) {
		t.Errorf("replaying plain events: %+v", replayed)
	}
	if _, err := s.Update(ctx, "/a", value(3), kv.ModRevision); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	var format []byte
	_ = db.View(func(tx *bolt.Tx) error {
		format = bytes.Clone(tx.Bucket(metaBucket).Get(metaFormat))
		if raw := tx.Bucket(objectsBucket).Get([]byte("/a")); len(raw) == 0 || raw[0] != formatZstd {
			t.Errorf("the object written after the upgrade is not compressed: %q", raw)
		}
		return nil
	})
	if !bytes.Equal(format, []byte{fileFormat}) {
		t.Errorf("file format after the upgrade: %v, want %d", format, fileFormat)
	}
	_ = db.Update(func(tx *bolt.Tx) error { return tx.Bucket(metaBucket).Put(metaFormat, []byte{fileFormat + 1}) })
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "newer hub") {
		if s != nil {
			s.Close()
		}
		t.Errorf("opening a file of a newer format: %v, want refused", err)
	}
}

func uvarintLen(n int) int { return len(binary.AppendUvarint(nil, uint64(n))) }
