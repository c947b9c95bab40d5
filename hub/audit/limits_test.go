package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"flotilla.dev/flotilla/hub/apiserver"
)

// clock is a settable time for the refusal budget and MinHistory.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func openTest(t *testing.T, opts Options) (*Log, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), FileName)
	l, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, path
}

func readAll(t *testing.T, path string) []Entry {
	t.Helper()
	es, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func refusal(ip string) apiserver.AuditEvent {
	return apiserver.AuditEvent{SourceIP: ip, UserAgent: "curl/8", Verb: "get", Path: "/api/v1/secrets", Code: 401, Reason: "Unauthorized"}
}

// Entries within the caps are written exactly as before: the encoding of
// the Entry, nothing cut, no new field.
func TestNormalEntriesUnchanged(t *testing.T) {
	l, path := openTest(t, Options{})
	e := Entry{Time: time.Unix(100, 0).UTC(), User: "system:node:kiosk-1", Groups: []string{"system:nodes"}, SourceIP: "10.0.0.7",
		UserAgent: "flotilla-agent/v0.4 (linux/arm64)", Verb: "update", Resource: "leases", Namespace: "kube-node-lease", Name: "kiosk-1",
		Code: 200, Reason: `allowed by the node rule: a device may renew its own Lease <"kiosk-1">`}
	want, _ := json.Marshal(e)
	l.Write(e)
	l.Close()
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, append(want, '\n')) {
		t.Errorf("line changed:\n got %s\nwant %s", got, want)
	}
}

func TestFieldCaps(t *testing.T) {
	l, path := openTest(t, Options{})
	big := strings.Repeat("x", 1<<20)
	l.Write(Entry{User: Anonymous, UserAgent: big, Verb: "post", Path: "/hooks/git/" + big, Reason: big, Name: big, Namespace: big, SourceIP: big, Code: 401})
	l.Close()
	es := readAll(t, path)
	if len(es) != 1 {
		t.Fatalf("%d entries", len(es))
	}
	e := es[0]
	if !e.Truncated {
		t.Error("a cut entry does not say so")
	}
	for _, f := range []struct {
		name, v string
		limit   int
	}{{"userAgent", e.UserAgent, capUserAgent}, {"path", e.Path, capPath}, {"reason", e.Reason, capReason},
		{"name", e.Name, capName}, {"namespace", e.Namespace, capName}, {"sourceIP", e.SourceIP, capSourceIP}} {
		if len(f.v) > f.limit || len(f.v) < f.limit/2 {
			t.Errorf("%s is %d bytes, want at most %d (and not much less)", f.name, len(f.v), f.limit)
		}
		if !strings.HasSuffix(f.v, fmt.Sprintf("…[%d bytes]", len(big))) && f.name != "path" {
			t.Errorf("%s does not end with the original size: %q", f.name, f.v[len(f.v)-20:])
		}
	}
	if !strings.HasPrefix(e.Path, "/hooks/git/xxx") || !strings.HasSuffix(e.Path, fmt.Sprintf("…[%d bytes]", len(big)+len("/hooks/git/"))) {
		t.Errorf("path %q...%q", e.Path[:20], e.Path[len(e.Path)-20:])
	}
	// A cut never splits a character.
	c := &cutter{scale: 1}
	s := c.str(strings.Repeat("é", 300), capUserAgent)
	if !strings.HasPrefix(s, "é") || strings.ContainsRune(s, '\uFFFD') || !c.cut {
		t.Errorf("cut %q", s)
	}
}

// Whatever an entry holds, its line stays within MaxLineBytes: many
// groups, every field at its cap, characters JSON writes 6 bytes for.
func TestLineCap(t *testing.T) {
	for _, limit := range []int{DefaultMaxLineBytes, 1000, minLineBytes} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			l, path := openTest(t, Options{MaxLineBytes: limit})
			nasty := strings.Repeat("<\x01\"é\xff", 1<<16)
			groups := make([]string, 1000)
			for i := range groups {
				groups[i] = nasty
			}
			all := Entry{User: nasty, Groups: groups, SourceIP: nasty, UserAgent: nasty, Verb: nasty, APIGroup: nasty, Resource: nasty,
				Subresource: nasty, Namespace: nasty, Name: nasty, Path: nasty, Code: 403, Reason: nasty}
			l.Write(all)
			var many []string
			for i := range 40 {
				many = append(many, fmt.Sprint("group-", i))
			}
			l.Write(Entry{User: "u", Groups: many, Verb: "create", Code: 201})
			l.Close()
			data, _ := os.ReadFile(path)
			lines := bytes.SplitAfter(data, []byte("\n"))
			for i, line := range lines[:len(lines)-1] {
				if len(line) > limit {
					t.Errorf("line %d is %d bytes, over %d", i, len(line), limit)
				}
			}
			es := readAll(t, path)
			if len(es) != 2 || !es[0].Truncated || !es[1].Truncated || es[0].Code != 403 || es[1].Verb != "create" {
				t.Fatalf("entries %+v", es)
			}
			if limit == DefaultMaxLineBytes && (len(es[1].Groups) != maxGroups+1 || es[1].Groups[maxGroups] != "…[8 more groups]") {
				t.Errorf("groups cut to %d: %q", len(es[1].Groups), es[1].Groups[len(es[1].Groups)-1])
			}
		})
	}
}

// Refusals of unauthenticated clients share one budget; those over it
// are counted, and the count is written before the next refusal that is.
func TestRefusalBudget(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	l, path := openTest(t, Options{RefusalRate: 10, RefusalBurst: 100, Now: clk.Now})
	for i := range 150 {
		l.Audit(refusal(fmt.Sprintf("198.51.100.%d", i)))
	}
	// Other clients and other entries are not charged.
	l.Audit(apiserver.AuditEvent{User: &apiserver.UserInfo{Name: "vera"}, Verb: "get", Resource: "secrets", Code: 403})
	for range 300 {
		l.Audit(apiserver.AuditEvent{User: &apiserver.UserInfo{Name: "system:node:a"}, Verb: "update", Resource: "leases", Code: 200})
	}
	clk.Add(150 * time.Millisecond) // one token back
	l.Audit(refusal("203.0.113.9"))
	l.Audit(refusal("203.0.113.10")) // over again
	l.Close()
	es := readAll(t, path)
	var anon, vera, leases, summaries []Entry
	for _, e := range es {
		switch {
		case e.Verb == VerbDropped:
			summaries = append(summaries, e)
		case e.User == Anonymous:
			anon = append(anon, e)
		case e.User == "vera":
			vera = append(vera, e)
		case e.Resource == "leases":
			leases = append(leases, e)
		}
	}
	if len(anon) != 101 || anon[99].SourceIP != "198.51.100.99" || anon[100].SourceIP != "203.0.113.9" {
		t.Errorf("%d unauthenticated refusals written, want the burst of 100 and one more", len(anon))
	}
	if len(vera) != 1 || len(leases) != 300 {
		t.Errorf("an authenticated refusal (%d) or the lease writes (%d of 300) were charged to the strangers' budget", len(vera), len(leases))
	}
	// The first count precedes the refusal that resumed the log; the last
	// (one dropped after it) is written at Close.
	if len(summaries) != 2 {
		t.Fatalf("%d dropped-count entries, want 2: %+v", len(summaries), summaries)
	}
	s := summaries[0]
	if s.User != Anonymous || s.Dropped != 50 || s.SourceIP != "198.51.100.149" || s.DroppedSince == nil || !s.DroppedSince.Equal(time.Unix(1000, 0)) ||
		!strings.Contains(s.Reason, "50 refusals of unauthenticated clients were not written") || !strings.Contains(s.Reason, "budget of 10 refusals a second (burst 100)") {
		t.Errorf("count entry %+v", s)
	}
	for i, e := range es {
		if e.Verb == VerbDropped && e.Dropped == 50 && (i+1 >= len(es) || es[i+1].SourceIP != "203.0.113.9") {
			t.Error("the count is not written just before the refusal that resumed the log")
		}
	}
	if summaries[1].Dropped != 1 || summaries[1].SourceIP != "203.0.113.10" {
		t.Errorf("count written at Close %+v", summaries[1])
	}
}

// Each authenticated user has a budget of its own.
func TestRefusalBudgetPerUser(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	l, path := openTest(t, Options{RefusalRate: 1, RefusalBurst: 5, Now: clk.Now})
	for _, user := range []string{"system:node:a", "system:node:b"} {
		for range 20 {
			l.Audit(apiserver.AuditEvent{User: &apiserver.UserInfo{Name: user}, Verb: "create", Resource: "pods", Code: 429})
		}
	}
	l.Close()
	n := map[string]int{}
	dropped := map[string]int64{}
	for _, e := range readAll(t, path) {
		if e.Verb == VerbDropped {
			dropped[e.User] += e.Dropped
		} else {
			n[e.User]++
		}
	}
	for _, user := range []string{"system:node:a", "system:node:b"} {
		if n[user] != 5 || dropped[user] != 15 {
			t.Errorf("%s: %d written, %d counted as dropped; want 5 and 15", user, n[user], dropped[user])
		}
	}
}

// Without another refusal, the count is written once the budget allows.
func TestDroppedCountWrittenWhenBudgetAllows(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	l, path := openTest(t, Options{RefusalRate: 10, RefusalBurst: 3, Now: clk.Now})
	for range 10 {
		l.Audit(refusal("192.0.2.1"))
	}
	time.Sleep(3 * flushDelay)
	for _, e := range readAll(t, path) {
		if e.Verb == VerbDropped {
			t.Fatal("the count was written while the budget was empty")
		}
	}
	clk.Add(time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for {
		es := readAll(t, path)
		if last := es[len(es)-1]; last.Verb == VerbDropped {
			if last.Dropped != 7 {
				t.Errorf("count %d, want 7", last.Dropped)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the count was never written")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Refusals never rotate away a file younger than MinHistory: they are
// counted instead, while other entries still rotate.
func TestMinHistory(t *testing.T) {
	clk := &clock{t: time.Now()}
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	l, err := Open(path, Options{MaxSize: 2000, MaxBackups: 3, RefusalRate: -1, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Write(Entry{User: "flotilla:admin", Verb: "delete", Resource: "secrets", Name: "evidence", Code: 200})
	for range 1000 {
		l.Audit(refusal("203.0.113.7"))
	}
	l.Flush()
	if !contains(t, dir, func(e Entry) bool { return e.Name == "evidence" }) {
		t.Fatal("refusals rotated a young file away")
	}
	if _, err := os.Stat(path + ".3"); err != nil {
		t.Fatalf("the refusals did not fill the backups first: %v", err)
	}
	// Other entries rotate as before.
	for i := range 40 {
		l.Write(Entry{User: "flotilla:admin", Verb: "update", Resource: "configmaps", Name: fmt.Sprint("cm-", i), Code: 200})
	}
	l.Flush()
	if contains(t, dir, func(e Entry) bool { return e.Name == "evidence" }) {
		t.Error("other entries did not rotate")
	}
	if !contains(t, dir, func(e Entry) bool { return e.Name == "cm-39" }) {
		t.Error("the newest entry is missing")
	}
	// Past MinHistory, refusals rotate again, first with their count (or
	// the count was written once the ConfigMaps made room).
	clk.Add(2 * time.Hour)
	for range 5 {
		l.Audit(refusal("203.0.113.8"))
	}
	l.Flush()
	if !contains(t, dir, func(e Entry) bool {
		return e.Verb == VerbDropped && e.Dropped > 100 && strings.Contains(e.Reason, "rotated away entries younger than 1h0m0s")
	}) {
		t.Error("no count of the refusals MinHistory held back")
	}
	if !contains(t, dir, func(e Entry) bool { return e.SourceIP == "203.0.113.8" }) {
		t.Error("refusals past MinHistory were not written")
	}
}

func contains(t *testing.T, dir string, f func(Entry) bool) bool {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, FileName+"*"))
	for _, file := range files {
		for _, e := range readAll(t, file) {
			if f(e) {
				return true
			}
		}
	}
	return false
}

func countSyncs(t *testing.T) *atomic.Int64 {
	var n atomic.Int64
	orig := syncFile
	syncFile = func(f *os.File) error { n.Add(1); return orig(f) }
	t.Cleanup(func() { syncFile = orig })
	return &n
}

// Entries are fsynced within SyncInterval, on rotation and at Close.
func TestSync(t *testing.T) {
	syncs := countSyncs(t)
	path := filepath.Join(t.TempDir(), FileName)
	l, err := Open(path, Options{MaxSize: 1000, SyncInterval: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if n := syncs.Load(); n != 0 {
		t.Errorf("%d syncs with nothing written", n)
	}
	l.Write(Entry{User: "u", Verb: "create", Code: 201})
	deadline := time.Now().Add(5 * time.Second)
	for syncs.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a written entry was never synced")
		}
		time.Sleep(10 * time.Millisecond)
	}
	l.mu.Lock()
	unsynced := l.unsynced
	l.mu.Unlock()
	if unsynced {
		t.Error("still unsynced after the sync")
	}
	before := syncs.Load()
	for i := range 20 { // about 1300 bytes: one rotation
		l.Write(Entry{User: "u", Verb: "create", Name: fmt.Sprint(i), Code: 201})
	}
	if syncs.Load() != before+1 {
		t.Errorf("rotation synced %d times, want once", syncs.Load()-before)
	}
	before = syncs.Load()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if syncs.Load() != before+1 {
		t.Error("Close did not sync")
	}
}
