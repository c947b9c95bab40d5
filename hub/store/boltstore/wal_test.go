package boltstore

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"flotilla.dev/flotilla/hub/store"
	"flotilla.dev/flotilla/internal/testlog"
)

// logAfterCrash makes a store at revision 1 (/a created) and a log beside
// it, as a hub killed after acknowledging more writes leaves them: /b
// created at 2, /a updated at 3, then whatever tail adds.
func logAfterCrash(t *testing.T, first int64, tail func(records []byte) []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(context.Background(), "/a", []byte("a1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(walDirFor(path)); err != nil {
		t.Fatalf("the log's directory: %v", err)
	}
	if segs, _ := filepath.Glob(filepath.Join(walDirFor(path), "*"+walSuffix)); len(segs) != 0 {
		t.Fatalf("a closed store left its log behind: %v", segs)
	}
	b := encodeEvent(eventRecord{Type: store.EventPut, Created: true, Key: "/b", Value: []byte("b2"), CreateRev: 2})
	a := encodeEvent(eventRecord{Type: store.EventPut, Key: "/a", Value: []byte("a3"), PrevValue: []byte("a1"), CreateRev: 1, PrevModRev: 1})
	records := append(encodeWALRecord(nil, first, [][]byte{b}), encodeWALRecord(nil, first+1, [][]byte{a})...)
	if tail != nil {
		records = tail(records)
	}
	if err := os.WriteFile(filepath.Join(walDirFor(path), segmentName(first)), records, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLogRecoversAcknowledgedWrites: writes a crash left in the log only
// are in the store after Open, a record cut short at the end (a crash
// during its append, never acknowledged) is dropped with a warning, and
// the recovered log is deleted.
func TestLogRecoversAcknowledgedWrites(t *testing.T) {
	for _, tc := range []struct {
		name string
		tail func([]byte) []byte
	}{
		{"complete", nil},
		{"torn header", func(r []byte) []byte { return append(r, 0x12, 0x34, 0x56) }},
		{"torn record", func(r []byte) []byte {
			c := encodeEvent(eventRecord{Type: store.EventPut, Created: true, Key: "/c", Value: []byte("c4"), CreateRev: 4})
			next := encodeWALRecord(nil, 4, [][]byte{c})
			return append(r, next[:len(next)-3]...)
		}},
		{"torn checksum", func(r []byte) []byte {
			c := encodeEvent(eventRecord{Type: store.EventPut, Created: true, Key: "/c", Value: []byte("c4"), CreateRev: 4})
			next := encodeWALRecord(nil, 4, [][]byte{c})
			next[len(next)-1] ^= 0xff
			return append(r, next...)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := logAfterCrash(t, 2, tc.tail)
			var logged testlog.Buffer
			s, err := Open(path, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			if cur, _, _ := s.Revision(ctx); cur != 3 {
				t.Errorf("revision %d after recovery, want 3", cur)
			}
			if kv, err := s.Get(ctx, "/a"); err != nil || string(kv.Value) != "a3" || kv.ModRevision != 3 || kv.CreateRevision != 1 {
				t.Errorf("/a: %+v, %v", kv, err)
			}
			if kv, err := s.Get(ctx, "/b"); err != nil || string(kv.Value) != "b2" || kv.ModRevision != 2 {
				t.Errorf("/b: %+v, %v", kv, err)
			}
			if _, err := s.Get(ctx, "/c"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("/c, never acknowledged: %v", err)
			}
			// The recovered writes are in the event log too.
			kvs, _, err := s.List(ctx, "/", 1)
			if err != nil || len(kvs) != 1 || string(kvs[0].Value) != "a1" {
				t.Errorf("list at 1: %+v, %v", kvs, err)
			}
			torn := strings.Contains(logged.String(), "cut short by a crash")
			if torn != (tc.tail != nil) {
				t.Errorf("warned of a torn record: %v, want %v:\n%s", torn, tc.tail != nil, logged.String())
			}
			segs, _ := filepath.Glob(filepath.Join(walDirFor(path), "*"+walSuffix))
			if len(segs) != 1 || filepath.Base(segs[0]) != segmentName(4) {
				t.Errorf("segments after recovery: %v, want only a new one from revision 4", segs)
			}
			// What is written after recovery follows on.
			if rev, err := s.Create(ctx, "/d", []byte("d")); err != nil || rev != 4 {
				t.Errorf("create after recovery: %d, %v", rev, err)
			}
		})
	}
}

// TestDamagedLogIsRefused: a log that does not check out where more
// follows, or that skips revisions, cannot say what was acknowledged; Open
// refuses it, says which file and what to do, and changes nothing.
func TestDamagedLogIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first int64
		tail  func([]byte) []byte
		want  string
	}{
		{"flipped byte", 2, func(r []byte) []byte { r[walRecordHeader+12] ^= 0x01; return r }, "checksum mismatch"},
		{"gap", 3, nil, "writes are missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := logAfterCrash(t, tc.first, tc.tail)
			s, err := Open(path, Options{})
			if err == nil {
				s.Close()
				t.Fatal("opened a store with a damaged log")
			}
			if !errors.Is(err, errLogDamaged) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "move "+walDirFor(path)+" away") {
				t.Errorf("error %q, want errLogDamaged saying %q and what to do", err, tc.want)
			}
			segs, _ := filepath.Glob(filepath.Join(walDirFor(path), "*"+walSuffix))
			if len(segs) != 1 {
				t.Errorf("the damaged log was changed: %v", segs)
			}
		})
	}
}

// TestLogFailureStopsWrites: once the log cannot be written or cut back,
// nothing more is acknowledged (the error says to restart the hub), while
// reads still answer.
func TestLogFailureStopsWrites(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Create(ctx, "/a", []byte("a")); err != nil {
		t.Fatal(err)
	}
	// A write and a cut-back that both fail, as on a disk gone away.
	if err := s.wal.f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "/b", []byte("b")); err == nil {
		t.Fatal("a write the log could not take was acknowledged")
	}
	_, err = s.Update(ctx, "/a", []byte("a2"), 0)
	if err == nil || !strings.Contains(err.Error(), "restart the hub") {
		t.Fatalf("a write after the log failed: %v, want a refusal saying to restart", err)
	}
	if kv, err := s.Get(ctx, "/a"); err != nil || string(kv.Value) != "a" {
		t.Errorf("get after the log failed: %+v, %v", kv, err)
	}
	if _, err := s.Get(ctx, "/b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("/b was not acknowledged: %v", err)
	}
	_ = s.Close()
}
