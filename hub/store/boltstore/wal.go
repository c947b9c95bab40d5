package boltstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"flotilla.dev/flotilla/internal/atomicfile"
)

// The write-ahead log: what makes a write durable before the b-tree has it.
// Each group commit is one record appended to the current segment and one
// fsync, whatever the number of pages the same writes would dirty in
// the b-tree. Record layout:
//
//	crc32c(4) length(4) payload
//	payload: format(1) first revision(8) count(uvarint)
//	         count × (uvarint length, event record as the events bucket stores it)
//
// The checksum covers the length and the payload, so a record cut short by
// a crash (the last one; nothing is appended before the one before it was
// synced) is told apart from a complete one.
const (
	// walFormat is the format byte of a log record (its events are event
	// records, each with a format of its own).
	walFormat       = 1
	walRecordHeader = 4 + 4
	walSuffix       = ".log"
	// walMaxRecord bounds what recovery allocates for one record's length
	// field: a batch is at most MaxBatchBytes of values, each logged with
	// its previous value.
	walMaxRecord = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errLogDamaged is a log record that is neither complete nor the torn end
// of the log.
var errLogDamaged = errors.New("store log damaged")

// walDirFor is the directory of the log of the store file at path:
// DATA_DIR/state.wal beside DATA_DIR/state.db.
func walDirFor(path string) string {
	return strings.TrimSuffix(path, ".db") + ".wal"
}

// walSegment is one file of the log, named for the first revision it may
// hold.
type walSegment struct {
	path  string
	first int64
	last  int64 // last revision appended; first-1 while empty
}

// wal is the log's writing side. Only the write loop appends and rotates;
// removeThrough is called from the write loop too.
type wal struct {
	dir          string
	segmentBytes int64 // when to move on to a new segment
	f            *os.File
	cur          walSegment
	size         int64
	old          []walSegment // closed segments, oldest first
	buf          []byte
	// lastWrite and lastSync are what the last append took, for the log
	// of slow commits.
	lastWrite, lastSync time.Duration
}

// openWAL starts a new segment for revisions after rev in dir, which
// recovery left empty of anything the b-tree does not hold.
func openWAL(dir string, rev, segmentBytes int64) (*wal, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store log: %w", err)
	}
	w := &wal{dir: dir, segmentBytes: segmentBytes}
	if err := w.startSegment(rev + 1); err != nil {
		return nil, err
	}
	return w, nil
}

func segmentName(first int64) string {
	return fmt.Sprintf("%016x%s", first, walSuffix)
}

func (w *wal) startSegment(first int64) error {
	path := filepath.Join(w.dir, segmentName(first))
	// O_TRUNC: a segment of that name can only be one recovery found
	// nothing after the b-tree in.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("store log: %w", err)
	}
	// The segment's name must survive a crash as surely as its records.
	if err := atomicfile.SyncDir(w.dir); err != nil {
		_ = f.Close()
		return fmt.Errorf("store log: %w", err)
	}
	if w.f != nil {
		if err := w.f.Close(); err != nil {
			_ = f.Close()
			return fmt.Errorf("store log: close %s: %w", w.cur.path, err)
		}
		w.old = append(w.old, w.cur)
	}
	w.f, w.size = f, 0
	w.cur = walSegment{path: path, first: first, last: first - 1}
	return nil
}

// encodeWALRecord frames the events of one commit, the first at revision
// first, into buf.
func encodeWALRecord(buf []byte, first int64, events [][]byte) []byte {
	buf = append(buf[:0], make([]byte, walRecordHeader)...)
	buf = append(buf, walFormat)
	buf = binary.BigEndian.AppendUint64(buf, uint64(first))
	buf = binary.AppendUvarint(buf, uint64(len(events)))
	for _, e := range events {
		buf = binary.AppendUvarint(buf, uint64(len(e)))
		buf = append(buf, e...)
	}
	binary.BigEndian.PutUint32(buf[4:8], uint32(len(buf)-walRecordHeader))
	binary.BigEndian.PutUint32(buf[0:4], crc32.Checksum(buf[4:], castagnoli))
	return buf
}

// errSync is a log that could not be synced: after a failed fsync the
// kernel may have dropped pages it could not write, so nothing written
// since the last good sync can be counted on.
var errSync = errors.New("sync failed")

// append writes the events of one commit and syncs them. A write that
// fails is cut back, so that the next record does not follow a torn one;
// cutBack is the error of cutting it back, after which, as after a failed
// sync, the log cannot be trusted and the caller stops writing.
func (w *wal) append(first int64, events [][]byte) (cutBack error, err error) {
	if w.size >= w.segmentBytes {
		if err := w.startSegment(first); err != nil {
			return nil, err
		}
	}
	w.buf = encodeWALRecord(w.buf, first, events)
	start := time.Now()
	n, err := w.f.Write(w.buf)
	w.lastWrite = time.Since(start)
	if err != nil {
		if terr := w.f.Truncate(w.size); terr != nil {
			return terr, fmt.Errorf("store log %s: %w", w.cur.path, err)
		}
		return nil, fmt.Errorf("store log %s: %w", w.cur.path, err)
	}
	err = w.f.Sync()
	w.lastSync = time.Since(start) - w.lastWrite
	if err != nil {
		return nil, fmt.Errorf("store log %s: %w: %w", w.cur.path, errSync, err)
	}
	w.size += int64(n)
	w.cur.last = first + int64(len(events)) - 1
	// A large record would otherwise be kept for the life of the store.
	if cap(w.buf) > 1<<20 {
		w.buf = nil
	}
	return nil, nil
}

// removeThrough deletes the closed segments whose every revision the
// b-tree holds (rev and before).
func (w *wal) removeThrough(rev int64) error {
	var errs []error
	kept := w.old[:0]
	for _, seg := range w.old {
		if seg.last > rev {
			kept = append(kept, seg)
			continue
		}
		if err := os.Remove(seg.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			kept = append(kept, seg)
		}
	}
	clear(w.old[len(kept):])
	w.old = kept
	return errors.Join(errs...)
}

// close closes the current segment and, when the b-tree holds everything
// through rev, which is everything logged, deletes the log.
func (w *wal) close(checkpointed int64) error {
	err := w.f.Close()
	if err != nil || checkpointed < w.cur.last {
		return err
	}
	for _, seg := range append(w.old, w.cur) {
		if rerr := os.Remove(seg.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// walEvent is one event read back from the log.
type walEvent struct {
	rev int64
	raw []byte
}

// readWAL reads every complete record of the segments in dir, oldest
// first, and calls fn with each event after rev, in order. A record cut
// short at the end of the last segment (a crash during its append; never
// acknowledged) ends the log; anything else that does not check out is
// errLogDamaged.
func readWAL(dir string, rev int64, fn func(walEvent) error) (segments []string, torn int64, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("store log: %w", err)
	}
	type seg struct {
		path  string
		first int64
	}
	var segs []seg
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, walSuffix) || !e.Type().IsRegular() {
			continue
		}
		first, perr := strconv.ParseInt(strings.TrimSuffix(name, walSuffix), 16, 64)
		if perr != nil {
			return nil, 0, fmt.Errorf("store log: %s in %s is not a segment of the log; move it away: %w", name, dir, errLogDamaged)
		}
		segs = append(segs, seg{path: filepath.Join(dir, name), first: first})
	}
	slices.SortFunc(segs, func(a, b seg) int { return int(min(max(a.first-b.first, -1), 1)) })
	next := rev + 1
	for i, sg := range segs {
		segments = append(segments, sg.path)
		data, err := os.ReadFile(sg.path)
		if err != nil {
			return segments, 0, fmt.Errorf("store log: %w", err)
		}
		last := i == len(segs)-1
		off := 0
		for off < len(data) {
			payload, n, rerr := nextWALRecord(data[off:])
			if rerr != nil {
				if last && errors.Is(rerr, io.ErrUnexpectedEOF) {
					return segments, int64(len(data) - off), nil
				}
				return segments, 0, fmt.Errorf("store log %s at byte %d: %w", sg.path, off, rerr)
			}
			if err := walRecordEvents(payload, func(r int64, raw []byte) error {
				switch {
				case r < next:
					return nil
				case r > next:
					return fmt.Errorf("store log %s has revision %d where %d was due: writes are missing: %w", sg.path, r, next, errLogDamaged)
				}
				next++
				return fn(walEvent{rev: r, raw: raw})
			}); err != nil {
				return segments, 0, err
			}
			off += n
		}
	}
	return segments, 0, nil
}

// nextWALRecord returns the payload of the record at the start of data and
// the record's length. io.ErrUnexpectedEOF is a record whose bytes end
// before its length says, or whose checksum fails with nothing after it
// (a torn append); other failures are errLogDamaged.
func nextWALRecord(data []byte) ([]byte, int, error) {
	if len(data) < walRecordHeader {
		return nil, 0, io.ErrUnexpectedEOF
	}
	n := binary.BigEndian.Uint32(data[4:8])
	if n > walMaxRecord {
		// A length cut short by the crash reads as anything.
		return nil, 0, io.ErrUnexpectedEOF
	}
	end := walRecordHeader + int(n)
	if end > len(data) {
		return nil, 0, io.ErrUnexpectedEOF
	}
	if crc32.Checksum(data[4:end], castagnoli) != binary.BigEndian.Uint32(data[0:4]) {
		if end == len(data) {
			return nil, 0, io.ErrUnexpectedEOF
		}
		return nil, 0, fmt.Errorf("checksum mismatch in a record followed by %d more bytes: %w", len(data)-end, errLogDamaged)
	}
	return data[walRecordHeader:end], end, nil
}

func walRecordEvents(p []byte, fn func(rev int64, raw []byte) error) error {
	if len(p) < 1+8 || p[0] != walFormat {
		return fmt.Errorf("log record of %d bytes is not of format %d: %w", len(p), walFormat, errLogDamaged)
	}
	first := int64(binary.BigEndian.Uint64(p[1:9]))
	p = p[9:]
	count, n := binary.Uvarint(p)
	if n <= 0 {
		return fmt.Errorf("log record count: %w", errLogDamaged)
	}
	p = p[n:]
	for i := range count {
		l, n := binary.Uvarint(p)
		if n <= 0 || uint64(len(p)-n) < l {
			return fmt.Errorf("log record event %d of %d: %w", i+1, count, errLogDamaged)
		}
		if err := fn(first+int64(i), p[n:n+int(l)]); err != nil {
			return err
		}
		p = p[n+int(l):]
	}
	if len(p) != 0 {
		return fmt.Errorf("log record has %d trailing bytes: %w", len(p), errLogDamaged)
	}
	return nil
}
