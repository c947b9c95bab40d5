package boltstore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"flotilla.dev/flotilla/hub/store"
)

// On-disk records start with a format byte so that a later layout can be
// told apart from this one instead of being misread.
const recordFormat = 1

// errCorrupt marks a record that cannot be decoded: the file was damaged or
// written by an incompatible version.
var errCorrupt = errors.New("corrupt record")

// objectHeader is format byte, create revision, mod revision.
const objectHeader = 1 + 8 + 8

func encodeObject(createRev, modRev int64, value []byte) []byte {
	buf := make([]byte, objectHeader+len(value))
	buf[0] = recordFormat
	binary.BigEndian.PutUint64(buf[1:9], uint64(createRev))
	binary.BigEndian.PutUint64(buf[9:17], uint64(modRev))
	copy(buf[objectHeader:], value)
	return buf
}

// decodeObject returns the revisions and the value; the value aliases raw,
// so callers that keep it past the transaction copy it.
func decodeObject(raw []byte) (createRev, modRev int64, value []byte, err error) {
	if len(raw) < objectHeader || raw[0] != recordFormat {
		return 0, 0, nil, fmt.Errorf("object record of %d bytes: %w", len(raw), errCorrupt)
	}
	createRev = int64(binary.BigEndian.Uint64(raw[1:9]))
	modRev = int64(binary.BigEndian.Uint64(raw[9:17]))
	return createRev, modRev, raw[objectHeader:], nil
}

func encodeRev(rev int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(rev))
	return b[:]
}

func decodeRev(b []byte) int64 {
	if len(b) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}

// Event record layout:
//
//	format(1) type(1) flags(1) createRev(8) prevModRev(8)
//	uvarint len(key) key  uvarint len(value) value  prev...
//
// The revision of the event is its key in the events bucket. A delete stores
// the removed value once, as value; an update stores both values; a creation
// has no previous value.
const (
	eventHeader = 1 + 1 + 1 + 8 + 8

	flagCreated = 1 << 0
	flagHasPrev = 1 << 1
)

// eventRecord is an event as stored, with what rolling a list back needs:
// the previous ModRevision of the key.
type eventRecord struct {
	Type       store.EventType
	Created    bool
	Key        string
	Value      []byte
	PrevValue  []byte
	CreateRev  int64
	PrevModRev int64
}

func encodeEvent(e eventRecord) []byte {
	var flags byte
	if e.Created {
		flags |= flagCreated
	}
	hasPrev := e.Type == store.EventPut && !e.Created
	if hasPrev {
		flags |= flagHasPrev
	}
	n := eventHeader + 2*binary.MaxVarintLen64 + len(e.Key) + len(e.Value)
	if hasPrev {
		n += len(e.PrevValue)
	}
	buf := make([]byte, eventHeader, n)
	buf[0] = recordFormat
	buf[1] = byte(e.Type)
	buf[2] = flags
	binary.BigEndian.PutUint64(buf[3:11], uint64(e.CreateRev))
	binary.BigEndian.PutUint64(buf[11:19], uint64(e.PrevModRev))
	buf = binary.AppendUvarint(buf, uint64(len(e.Key)))
	buf = append(buf, e.Key...)
	buf = binary.AppendUvarint(buf, uint64(len(e.Value)))
	buf = append(buf, e.Value...)
	if hasPrev {
		buf = append(buf, e.PrevValue...)
	}
	return buf
}

// eventKey returns just the key of an event record, so that a replay can
// skip events outside its prefix without copying their values.
func eventKey(raw []byte) ([]byte, error) {
	if len(raw) < eventHeader || raw[0] != recordFormat {
		return nil, fmt.Errorf("event record of %d bytes: %w", len(raw), errCorrupt)
	}
	rest := raw[eventHeader:]
	kl, n := binary.Uvarint(rest)
	if n <= 0 || uint64(len(rest)-n) < kl {
		return nil, fmt.Errorf("event record key length: %w", errCorrupt)
	}
	return rest[n : n+int(kl)], nil
}

// decodeEvent copies everything out of raw: the record may live in bbolt's
// memory map, which is only valid for the transaction.
func decodeEvent(raw []byte) (eventRecord, error) {
	key, err := eventKey(raw)
	if err != nil {
		return eventRecord{}, err
	}
	e := eventRecord{
		Type:       store.EventType(raw[1]),
		Created:    raw[2]&flagCreated != 0,
		Key:        string(key),
		CreateRev:  int64(binary.BigEndian.Uint64(raw[3:11])),
		PrevModRev: int64(binary.BigEndian.Uint64(raw[11:19])),
	}
	if e.Type != store.EventPut && e.Type != store.EventDelete {
		return eventRecord{}, fmt.Errorf("event record type %d: %w", raw[1], errCorrupt)
	}
	rest := raw[eventHeader:]
	_, n := binary.Uvarint(rest)
	rest = rest[n+len(key):]
	vl, n := binary.Uvarint(rest)
	if n <= 0 || uint64(len(rest)-n) < vl {
		return eventRecord{}, fmt.Errorf("event record value length: %w", errCorrupt)
	}
	e.Value = clone(rest[n : n+int(vl)])
	rest = rest[n+int(vl):]
	switch {
	case raw[2]&flagHasPrev != 0:
		e.PrevValue = clone(rest)
	case len(rest) != 0:
		return eventRecord{}, fmt.Errorf("event record has %d trailing bytes: %w", len(rest), errCorrupt)
	case e.Type == store.EventDelete:
		e.PrevValue = e.Value
	}
	return e, nil
}

// storeEvent is the record as a watcher sees it at revision rev.
func (e eventRecord) storeEvent(rev int64) store.Event {
	return store.Event{
		Type: e.Type,
		KV: store.KV{
			Key:            e.Key,
			Value:          e.Value,
			ModRevision:    rev,
			CreateRevision: e.CreateRev,
		},
		PrevValue: e.PrevValue,
		Created:   e.Created,
	}
}

// clone returns a copy that is never nil, so an empty value stays
// distinguishable from "no previous value".
func clone(b []byte) []byte {
	out := make([]byte, len(b))
	copy(out, b)
	return out
}
