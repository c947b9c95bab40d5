package boltstore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"flotilla.dev/flotilla/hub/store/boltstore"
	"flotilla.dev/flotilla/internal/testenv"
)

// crashHelperEnv makes the test binary run crashHelper instead of the
// tests: TestCrashKeepsAcknowledgedWrites re-executes itself with it.
const crashHelperEnv = "FLOTILLA_BOLTSTORE_CRASH_HELPER"

// crashOptionsEnv set to "checkpoints" makes the helper checkpoint every
// few milliseconds into log segments of a few KiB, so that kills land in
// checkpoints, segment changes and deletions too.
const crashOptionsEnv = "FLOTILLA_BOLTSTORE_CRASH_OPTIONS"

// crashHelper writes from 16 goroutines until killed and prints
// "ack <revision> <key>" for each acknowledged create and update.
func crashHelper(dir string) error {
	var opts boltstore.Options
	if os.Getenv(crashOptionsEnv) == "checkpoints" {
		opts = boltstore.Options{CheckpointInterval: 3 * time.Millisecond, LogSegmentBytes: 4096}
	}
	s, err := boltstore.Open(filepath.Join(dir, "state.db"), opts)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	ack := func(rev int64, key string) {
		mu.Lock()
		defer mu.Unlock()
		// Unbuffered: once printed, the parent may count on it.
		fmt.Fprintf(os.Stdout, "ack %d %s\n", rev, key)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				key := fmt.Sprintf("/crash/%d/%02d/%06d", os.Getpid(), w, i)
				rev, err := s.Create(ctx, key, []byte(key+"@create"))
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					return
				}
				ack(rev, key)
				if i%4 == 0 {
					rev, err = s.Update(ctx, key, []byte(key+"@update"), rev)
					if err != nil {
						fmt.Fprintln(os.Stderr, err)
						return
					}
					ack(rev, key)
				}
			}
		}()
	}
	wg.Wait()
	return s.Close()
}

// TestCrashKeepsAcknowledgedWrites kills a writing process and checks
// that every acknowledged write is there after it: in the first rounds
// recovered from the log (nothing checkpointed yet), in the later ones
// with checkpoints and log segments changing every few milliseconds.
func TestCrashKeepsAcknowledgedWrites(t *testing.T) {
	testenv.Integration(t, "crash test re-executes the test binary")
	dir := t.TempDir()
	for round, opts := range []string{"", "", "checkpoints", "checkpoints", "checkpoints"} {
		n := 300
		if opts != "" {
			n = 3000
		}
		acked := runAndKill(t, dir, n, opts)
		checkAcked(t, dir, acked, round)
	}
}

// runAndKill runs the helper on dir, SIGKILLs it after n acknowledgements
// and returns every acknowledgement it printed: key → last revision.
func runAndKill(t *testing.T, dir string, n int, opts string) map[string]int64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashHelperEnv+"="+dir, crashOptionsEnv+"="+opts)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]int64{}
	sc := bufio.NewScanner(out)
	count := 0
	killed := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// A line cut short by the kill has fewer fields and is not an
		// acknowledgement the parent could have relied on.
		if len(f) != 3 || f[0] != "ack" {
			continue
		}
		rev, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		acked[f[2]] = max(acked[f[2]], rev)
		count++
		if count == n && !killed {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatalf("kill helper: %v", err)
			}
			killed = true
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("helper exited after %d acknowledgements (%v): %s", count, err, stderr.String())
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("helper did not die by SIGKILL: %v; stderr: %s", err, stderr.String())
	}
	t.Logf("helper killed after %d acknowledgements (%d read in total)", n, count)
	return acked
}

func checkAcked(t *testing.T, dir string, acked map[string]int64, round int) {
	t.Helper()
	path := filepath.Join(dir, "state.db")
	// bbolt's own consistency check first: the file must be intact.
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("round %d: open after kill: %v", round, err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	})
	_ = db.Close()
	if err != nil {
		t.Fatalf("round %d: bbolt check after kill: %v", round, err)
	}

	s, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatalf("round %d: reopen after kill: %v", round, err)
	}
	defer s.Close()
	ctx := t.Context()
	var maxRev int64
	for key, rev := range acked {
		kv, err := s.Get(ctx, key)
		if err != nil {
			t.Fatalf("round %d: acknowledged write to %s at revision %d lost: %v", round, key, rev, err)
		}
		// A later unacknowledged update may have landed too; never less.
		if kv.ModRevision < rev {
			t.Fatalf("round %d: %s is at revision %d, acknowledged %d", round, key, kv.ModRevision, rev)
		}
		if kv.ModRevision == rev && !strings.HasPrefix(string(kv.Value), key+"@") {
			t.Fatalf("round %d: %s has value %q", round, key, kv.Value)
		}
		maxRev = max(maxRev, rev)
	}
	cur, _, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cur < maxRev {
		t.Fatalf("round %d: revision %d is behind acknowledged %d", round, cur, maxRev)
	}
	// The event log holds every revision, including each acknowledged one,
	// so watches can resume from anywhere.
	ch, err := s.Watch(ctx, "/crash/", 0)
	if err != nil {
		t.Fatal(err)
	}
	logged := map[int64]string{}
	for next := int64(1); next <= cur; {
		r, ok := <-ch
		if !ok || r.Err != nil {
			t.Fatalf("round %d: replay ended at revision %d of %d: %v", round, next, cur, r.Err)
		}
		for _, ev := range r.Events {
			if ev.KV.ModRevision != next {
				t.Fatalf("round %d: replay has revision %d where %d was due", round, ev.KV.ModRevision, next)
			}
			logged[next] = ev.KV.Key
			next++
		}
	}
	for key, rev := range acked {
		if logged[rev] != key {
			t.Fatalf("round %d: event log has %q at acknowledged revision %d of %s", round, logged[rev], rev, key)
		}
	}
	kvs, listRev, err := s.List(ctx, "/crash/", 0)
	if err != nil {
		t.Fatal(err)
	}
	if listRev != cur || len(kvs) < len(acked) {
		t.Fatalf("round %d: list has %d objects at %d, acknowledged %d keys, revision %d", round, len(kvs), listRev, len(acked), cur)
	}
	if _, _, err := s.List(ctx, "/crash/", 1); err != nil {
		t.Fatalf("round %d: list at revision 1 (rolls back the whole log): %v", round, err)
	}
}
