package boltstore

import (
	"bytes"
	"errors"
	"testing"

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
