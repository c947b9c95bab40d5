package audit

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"flotilla.dev/flotilla/hub/apiserver"
)

func TestWriteAndRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.Audit(apiserver.AuditEvent{Time: time.Unix(100, 0).UTC(), User: &apiserver.UserInfo{Name: "alice", Groups: []string{"flotilla:viewers"}},
		Verb: "get", Resource: "secrets", Namespace: "default", Name: "db", Code: 403, Reason: "viewers may not read secrets"})
	l.Audit(apiserver.AuditEvent{Verb: "post", Path: "/join/v1/csr", Code: 401})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d entries, want 2", len(got))
	}
	if got[0].User != "alice" || got[0].Resource != "secrets" || got[0].Code != 403 || got[0].Reason == "" || got[0].Groups[0] != "flotilla:viewers" {
		t.Errorf("first entry %+v", got[0])
	}
	if got[1].User != Anonymous || got[1].Path != "/join/v1/csr" || got[1].Time.IsZero() {
		t.Errorf("second entry %+v", got[1])
	}
}

func TestRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	l, err := Open(path, Options{MaxSize: 1000, MaxBackups: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		l.Write(Entry{User: "u", Verb: "update", Resource: "leases", Name: fmt.Sprintf("n-%03d", i), Code: 200})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var total int
	for _, name := range []string{FileName, FileName + ".1", FileName + ".2"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if st.Size() > 1000 {
			t.Errorf("%s is %d bytes, over the 1000 limit", name, st.Size())
		}
		es, err := ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		total += len(es)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName+".3")); !os.IsNotExist(err) {
		t.Errorf("a third backup exists (err %v); only 2 are kept", err)
	}
	// The newest entry is in the current file, the backups hold older ones.
	cur, _ := ReadFile(path)
	if len(cur) == 0 || cur[len(cur)-1].Name != "n-099" {
		t.Errorf("current file does not end with the newest entry: %+v", cur)
	}
	if total >= 100 {
		t.Errorf("kept %d entries; rotation should have dropped the oldest", total)
	}
}

func TestFlushWithoutClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Write(Entry{User: "u", Verb: "create", Code: 201})
	deadline := time.Now().Add(10 * time.Second)
	for {
		es, _ := ReadFile(path)
		if len(es) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the entry never reached the file without an explicit flush")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
