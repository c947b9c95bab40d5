package boltstore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/klauspost/compress/zstd"

	"flotilla.dev/flotilla/hub/store"
)

// On-disk records start with a format byte so that a later layout can be
// told apart from this one instead of being misread. Records of both
// formats live side by side: a file written before values were
// compressed is read as it is, and its records are rewritten compressed
// as their keys change.
const (
	// formatPlain: the values follow the header as they are.
	formatPlain = 1
	// formatZstd: the values follow the header as one zstd frame. A
	// fleet's state is JSON that repeats its field names in every object,
	// and an update's event holds the object twice (before and after):
	// compressed, a Lease renewal's event takes about a quarter of its
	// size, and the file, which bbolt maps and the hub touches all of,
	// shrinks by as much.
	formatZstd = 2
)

// fileFormat is the meta bucket's format: the newest record format the
// file may hold. A hub that knows only formatPlain refuses to open a file
// of format 2 instead of misreading its records.
const fileFormat = formatZstd

// compressFrom: values shorter than this are written as they are; a zstd
// frame's header and checksum would take more than they save.
const compressFrom = 96

// maxRecordValues bounds what a compressed record may say it expands to,
// so that a damaged one cannot make the hub allocate without limit: a
// value is at most the API's 3 MiB body, an event holds two.
const maxRecordValues = 64 << 20

// zstd's encoders and decoders are safe for concurrent EncodeAll and
// DecodeAll. The fastest level: the store's writer compresses every write
// on its one goroutine. A 1 MiB window holds any object the API accepts
// (3 MiB bodies are rare; larger values compress as several blocks).
var (
	encoder = mustZstd(zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithWindowSize(1<<20), zstd.WithLowerEncoderMem(true)))
	decoder = mustZstd(zstd.NewReader(nil, zstd.WithDecoderConcurrency(0),
		zstd.WithDecoderMaxMemory(maxRecordValues), zstd.WithDecoderLowmem(true)))
)

// mustZstd: zstd refuses only options out of range, and these are
// constants.
func mustZstd[T any](v T, err error) T {
	if err != nil {
		panic("boltstore: zstd options: " + err.Error())
	}
	return v
}

// errCorrupt marks a record that cannot be decoded: the file was damaged or
// written by an incompatible version.
var errCorrupt = errors.New("corrupt record")

// compressed returns the plain record rec (whose first byte is its
// format) with what follows its first n bytes compressed, when that is
// shorter; otherwise rec. A record is built plain in one buffer, so a
// small one costs no second.
func compressed(rec []byte, n int) []byte {
	if len(rec)-n < compressFrom {
		return rec
	}
	out := encoder.EncodeAll(rec[n:], append(make([]byte, 0, n+(len(rec)-n)/2), rec[:n]...))
	if len(out) >= len(rec) {
		return rec
	}
	out[0] = formatZstd
	return out
}

// recordValues returns what follows a record's header of n bytes, expanded
// when compressed; a plain record's aliases raw.
func recordValues(raw []byte, n int) ([]byte, error) {
	switch raw[0] {
	case formatPlain:
		return raw[n:], nil
	case formatZstd:
		v, err := decoder.DecodeAll(raw[n:], nil)
		if err != nil {
			return nil, fmt.Errorf("expanding a record of %d bytes: %w: %w", len(raw), errCorrupt, err)
		}
		return v, nil
	}
	return nil, fmt.Errorf("record of format %d: %w", raw[0], errCorrupt)
}

// objectHeader is format byte, create revision, mod revision.
const objectHeader = 1 + 8 + 8

func encodeObject(createRev, modRev int64, value []byte) []byte {
	buf := make([]byte, objectHeader, objectHeader+len(value))
	buf[0] = formatPlain
	binary.BigEndian.PutUint64(buf[1:9], uint64(createRev))
	binary.BigEndian.PutUint64(buf[9:17], uint64(modRev))
	return compressed(append(buf, value...), objectHeader)
}

// decodeObject returns the revisions and the value; a plain record's value
// aliases raw, so callers that keep it past the transaction copy it.
func decodeObject(raw []byte) (createRev, modRev int64, value []byte, err error) {
	if len(raw) < objectHeader {
		return 0, 0, nil, fmt.Errorf("object record of %d bytes: %w", len(raw), errCorrupt)
	}
	if value, err = recordValues(raw, objectHeader); err != nil {
		return 0, 0, nil, fmt.Errorf("object record: %w", err)
	}
	createRev = int64(binary.BigEndian.Uint64(raw[1:9]))
	modRev = int64(binary.BigEndian.Uint64(raw[9:17]))
	return createRev, modRev, value, nil
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
//	uvarint len(key) key  values
//
// where values is "uvarint len(value) value prev...", compressed in a
// record of formatZstd; the key never is, so that a replay can skip
// events of other prefixes without expanding them. The revision of the
// event is its key in the events bucket. A delete stores the removed value
// once, as value; an update stores both values; a creation has no previous
// value.
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
	buf[0] = formatPlain
	buf[1] = byte(e.Type)
	buf[2] = flags
	binary.BigEndian.PutUint64(buf[3:11], uint64(e.CreateRev))
	binary.BigEndian.PutUint64(buf[11:19], uint64(e.PrevModRev))
	buf = binary.AppendUvarint(buf, uint64(len(e.Key)))
	buf = append(buf, e.Key...)
	values := len(buf)
	buf = binary.AppendUvarint(buf, uint64(len(e.Value)))
	buf = append(buf, e.Value...)
	if hasPrev {
		buf = append(buf, e.PrevValue...)
	}
	return compressed(buf, values)
}

// eventKey returns just the key of an event record, so that a replay can
// skip events outside its prefix without copying their values.
func eventKey(raw []byte) ([]byte, error) {
	if len(raw) < eventHeader || (raw[0] != formatPlain && raw[0] != formatZstd) {
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
	_, n := binary.Uvarint(raw[eventHeader:])
	rest, err := recordValues(raw, eventHeader+n+len(key))
	if err != nil {
		return eventRecord{}, fmt.Errorf("event record: %w", err)
	}
	if raw[0] == formatPlain {
		// Aliases the memory map; an expanded record is the event's own.
		rest = clone(rest)
	}
	vl, n := binary.Uvarint(rest)
	if n <= 0 || uint64(len(rest)-n) < vl {
		return eventRecord{}, fmt.Errorf("event record value length: %w", errCorrupt)
	}
	end := n + int(vl)
	e.Value = rest[n:end:end]
	rest = rest[end:]
	switch {
	case raw[2]&flagHasPrev != 0:
		e.PrevValue = rest
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
