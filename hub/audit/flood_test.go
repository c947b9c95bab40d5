package audit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"flotilla.dev/flotilla/hub/apiserver"
)

// TestRefusalFloodKeepsHistory reproduces issue 17's finding: strangers,
// refused without credentials, sent huge User-Agents, and their refusals
// rotated the whole history away within seconds. An admin's change made
// just before the flood must still be in the log after it.
func TestRefusalFloodKeepsHistory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	// The default layout scaled down 100 times: 6 files of 1 MiB.
	l, err := Open(path, Options{MaxSize: 1 << 20, MaxBackups: 5})
	if err != nil {
		t.Fatal(err)
	}
	l.Audit(apiserver.AuditEvent{Time: time.Now().UTC(), User: &apiserver.UserInfo{Name: "flotilla:admin", Groups: []string{"system:masters"}},
		Verb: "delete", Resource: "secrets", Namespace: "default", Name: "evidence", Code: 200})
	ua := strings.Repeat("A", 64<<10)
	for range 200 {
		l.Audit(apiserver.AuditEvent{Time: time.Now().UTC(), SourceIP: "203.0.113.7", UserAgent: ua, Verb: "post", Path: "/join/v1/csr", Code: 401,
			Reason: "Unauthorized: this hub needs a client certificate signed by its CA"})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	found, longest := false, 0
	var total int64
	files, _ := filepath.Glob(path + "*")
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		total += st.Size()
		es, err := ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.User == "flotilla:admin" && e.Name == "evidence" {
				found = true
			}
			longest = max(longest, len(e.UserAgent))
		}
	}
	if !found {
		t.Errorf("200 refused requests with 64 KiB User-Agents rotated the admin's change away (%d files, %d bytes)", len(files), total)
	}
	if longest > 1024 {
		t.Errorf("the log holds a %d-byte User-Agent", longest)
	}
}
