package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"flotilla.dev/flotilla/agent/runtime/logdriver"
	"flotilla.dev/flotilla/internal/testlog"
)

var t0 = time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC)

// criLine is one entry in the CRI format, at t0 plus sec seconds.
func criLine(sec int, stream, tag, content string) string {
	return t0.Add(time.Duration(sec)*time.Second).Format(time.RFC3339Nano) + " " + stream + " " + tag + " " + content + "\n"
}

// podLogs makes LogDir/<ns>_<pod>_<uid>/<container>/ and returns it.
func podLogs(t *testing.T, logDir, ns, pod, uid, container string) string {
	t.Helper()
	d := filepath.Join(logDir, ns+"_"+pod+"_"+uid, container)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func write(t *testing.T, path string, lines ...string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, ref LogRef, opts LogOptions) string {
	t.Helper()
	var b bytes.Buffer
	if err := readLogs(context.Background(), &b, ref, opts, nil); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func all() LogOptions { return LogOptions{TailLines: -1} }

func TestReadFormatsEntries(t *testing.T) {
	dir := t.TempDir()
	d := podLogs(t, dir, "default", "web", "u1", "app")
	write(t, filepath.Join(d, "0.log"),
		criLine(0, "stdout", "F", "hello"),
		criLine(1, "stderr", "P", "a long "),
		criLine(1, "stderr", "P", "line in "),
		criLine(2, "stderr", "F", "pieces"),
		"garbage that is not CRI\n",
		criLine(3, "stdout", "F", ""),
		criLine(4, "stdout", "F", "last"),
		"2030-05-01T12:00:05Z stdout F being writ", // no newline yet
	)
	f := &logFinder{dir: dir}
	ref, err := f.find("default", "web", "app", false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := read(t, ref, all()), "hello\na long line in pieces\n\nlast\n"; got != want {
		t.Errorf("logs = %q, want %q", got, want)
	}
	ts := LogOptions{TailLines: -1, Timestamps: true}
	want := "2030-05-01T12:00:00Z hello\n2030-05-01T12:00:01Z a long line in pieces\n2030-05-01T12:00:03Z \n2030-05-01T12:00:04Z last\n"
	if got := read(t, ref, ts); got != want {
		t.Errorf("timestamps = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		tail int64
		want string
	}{
		{0, ""},
		{1, "last\n"},
		{2, "\nlast\n"},
		{3, "a long line in pieces\n\nlast\n"},
		{4, "hello\na long line in pieces\n\nlast\n"},
		{100, "hello\na long line in pieces\n\nlast\n"},
	} {
		// The garbage line counts as a line, but shows nothing.
		if tc.tail == 3 {
			tc.want = "\nlast\n"
		}
		if tc.tail == 4 {
			tc.want = "a long line in pieces\n\nlast\n"
		}
		if got := read(t, ref, LogOptions{TailLines: tc.tail}); got != tc.want {
			t.Errorf("tail %d = %q, want %q", tc.tail, got, tc.want)
		}
	}
	if got := read(t, ref, LogOptions{TailLines: -1, LimitBytes: 8}); got != "hello\na " {
		t.Errorf("limitBytes 8 = %q", got)
	}
	if got := read(t, ref, LogOptions{TailLines: -1, Since: t0.Add(2 * time.Second)}); got != "\nlast\n" {
		t.Errorf("since = %q", got)
	}
}

func TestTailAcrossRotatedFiles(t *testing.T) {
	dir := t.TempDir()
	d := podLogs(t, dir, "ns", "p", "u", "c")
	base := filepath.Join(d, "3.log")
	write(t, base+".2", criLine(0, "stdout", "F", "one"), criLine(1, "stdout", "F", "two"))
	write(t, base+".1", criLine(2, "stdout", "F", "three"), criLine(3, "stdout", "P", "fo"))
	write(t, base, criLine(3, "stdout", "F", "ur"), criLine(4, "stdout", "F", "five"))
	ref, err := (&logFinder{dir: dir}).find("ns", "p", "c", false)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Attempt != 3 {
		t.Errorf("attempt = %d", ref.Attempt)
	}
	if got := read(t, ref, all()); got != "one\ntwo\nthree\nfour\nfive\n" {
		t.Errorf("all = %q", got)
	}
	for tail, want := range map[int64]string{
		1: "five\n", 2: "four\nfive\n", 3: "three\nfour\nfive\n", 4: "two\nthree\nfour\nfive\n", 9: "one\ntwo\nthree\nfour\nfive\n",
	} {
		if got := read(t, ref, LogOptions{TailLines: tail}); got != want {
			t.Errorf("tail %d = %q, want %q", tail, got, want)
		}
	}
}

func TestFindAttemptsAndErrors(t *testing.T) {
	dir := t.TempDir()
	f := &logFinder{dir: dir}
	d := podLogs(t, dir, "default", "web", "old-uid", "app")
	write(t, filepath.Join(d, "0.log"), criLine(0, "stdout", "F", "old pod"))
	past := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(d, "0.log"), past, past)
	d2 := podLogs(t, dir, "default", "web", "new-uid", "app")
	for _, a := range []string{"0", "1", "10", "2"} {
		write(t, filepath.Join(d2, a+".log"), criLine(0, "stdout", "F", "attempt "+a))
	}
	ref, err := f.find("default", "web", "app", false)
	if err != nil || ref.UID != "new-uid" || ref.Attempt != 10 {
		t.Fatalf("current = %+v, %v; want new-uid attempt 10", ref, err)
	}
	ref, err = f.find("default", "web", "app", true)
	if err != nil || ref.Attempt != 2 {
		t.Fatalf("previous = %+v, %v; want attempt 2", ref, err)
	}
	// The kubelet knows the pod's UID.
	f.podUID = func(ns, name string) (string, bool) { return "old-uid", true }
	if ref, err = f.find("default", "web", "app", false); err != nil || ref.UID != "old-uid" {
		t.Errorf("with a UID: %+v, %v", ref, err)
	}
	f.podUID = nil

	podLogs(t, dir, "default", "fresh", "u", "app") // no attempts yet
	single := podLogs(t, dir, "default", "single", "u", "app")
	write(t, filepath.Join(single, "0.log"), criLine(0, "stdout", "F", "x"))
	for _, tc := range []struct {
		ns, pod, c string
		prev       bool
		want       error
		msg        string
	}{
		{"default", "nope", "app", false, ErrNotFound, "has no logs on this node"},
		{"default", "web", "sidecar", false, ErrNotFound, `container "sidecar"`},
		{"default", "fresh", "app", false, ErrBadRequest, "waiting to start"},
		{"default", "single", "app", true, ErrBadRequest, "previous terminated container"},
		{"..", "web", "app", false, ErrBadRequest, "namespace"},
		{"default", "../../etc", "app", false, ErrBadRequest, "pod name"},
		{"default", "web", "a/b", false, ErrBadRequest, "container name"},
		{"default", "we*", "app", false, ErrBadRequest, "pod name"},
	} {
		_, err := f.find(tc.ns, tc.pod, tc.c, tc.prev)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("find(%s, %s, %s, %v) = %v, want %v with %q", tc.ns, tc.pod, tc.c, tc.prev, err, tc.want, tc.msg)
		}
	}
}

func TestFollowThroughRotation(t *testing.T) {
	dir := t.TempDir()
	d := podLogs(t, dir, "ns", "p", "u", "c")
	path := filepath.Join(d, "0.log")
	// A few lines per file; enough files kept that none is deleted while
	// the follower sleeps (what is deleted before it is read is gone).
	lf, err := logdriver.Open(path, 300, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	var want strings.Builder
	writeLine := func(i int) {
		line := fmt.Sprintf("line %03d", i)
		if err := lf.WriteEntry("stdout", false, []byte(line)); err != nil {
			t.Fatal(err)
		}
		want.WriteString(line + "\n")
	}
	for i := 0; i < 3; i++ {
		writeLine(i)
	}
	ref, err := (&logFinder{dir: dir}).find("ns", "p", "c", false)
	if err != nil {
		t.Fatal(err)
	}
	var out testlog.Buffer
	done := make(chan error, 1)
	fl := &follower{poll: time.Millisecond, idleChecks: 1}
	go func() { done <- readLogs(context.Background(), &out, ref, LogOptions{TailLines: -1, Follow: true}, fl) }()
	// Writes race with the follower's polls; rotations happen every few
	// lines (300 bytes), often more than once between two polls.
	for i := 3; i < 60; i++ {
		writeLine(i)
		if i%7 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	if _, err := os.Stat(path + ".2"); err != nil {
		t.Fatalf("the writer did not rotate: %v", err)
	}
	waitUntil(t, "the follower to catch up", func() bool { return out.String() == want.String() }, func() string { return out.String() + "\nwant\n" + want.String() })
	// A new attempt means this one is over: the follow ends.
	write(t, filepath.Join(d, "1.log"), criLine(0, "stdout", "F", "next"))
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follow did not end after a newer attempt started")
	}
	if out.String() != want.String() {
		t.Errorf("followed %q\nwant %q", out.String(), want.String())
	}
}

func TestFollowEndsWhenContainerStopsOrClientLeaves(t *testing.T) {
	dir := t.TempDir()
	d := podLogs(t, dir, "ns", "p", "u", "c")
	write(t, filepath.Join(d, "0.log"), criLine(0, "stdout", "F", "a"))
	ref, err := (&logFinder{dir: dir}).find("ns", "p", "c", false)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	running := true
	fl := &follower{poll: time.Millisecond, idleChecks: 2, running: func(_ context.Context, r LogRef) (bool, error) {
		if r.UID != "u" || r.Container != "c" || r.Attempt != 0 {
			t.Errorf("running asked about %+v", r)
		}
		mu.Lock()
		defer mu.Unlock()
		return running, nil
	}}
	var out testlog.Buffer
	done := make(chan error, 1)
	go func() { done <- readLogs(context.Background(), &out, ref, LogOptions{TailLines: -1, Follow: true}, fl) }()
	waitUntil(t, "the first line", func() bool { return out.String() == "a\n" })
	f, err := os.OpenFile(ref.Path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(criLine(1, "stdout", "F", "b"))
	f.Close()
	mu.Lock()
	running = false
	mu.Unlock()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follow did not end when the container stopped")
	}
	if out.String() != "a\nb\n" {
		t.Errorf("followed %q, want the line written before the stop too", out.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		done <- readLogs(ctx, &out, ref, LogOptions{TailLines: 0, Follow: true}, &follower{poll: time.Millisecond, idleChecks: 1})
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the follow did not end when its context did")
	}
}

func waitUntil(t *testing.T, what string, cond func() bool, state ...func() string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			for _, s := range state {
				t.Log(s())
			}
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestParseLogOptions(t *testing.T) {
	o, err := ParseLogOptions(map[string][]string{"follow": {"true"}, "tailLines": {"5"}, "timestamps": {"1"}, "limitBytes": {"100"}, "sinceTime": {"2030-05-01T12:00:00Z"}})
	if err != nil || !o.Follow || o.TailLines != 5 || !o.Timestamps || o.LimitBytes != 100 || !o.Since.Equal(t0) || o.Previous {
		t.Errorf("ParseLogOptions = %+v, %v", o, err)
	}
	if o, err := ParseLogOptions(nil); err != nil || o.TailLines != -1 {
		t.Errorf("defaults = %+v, %v", o, err)
	}
	for _, q := range []map[string][]string{
		{"follow": {"yes"}}, {"tailLines": {"-1"}}, {"tailLines": {"x"}}, {"limitBytes": {"0"}},
		{"sinceTime": {"yesterday"}}, {"sinceSeconds": {"0"}}, {"sinceSeconds": {"5"}, "sinceTime": {"2030-05-01T12:00:00Z"}},
	} {
		if _, err := ParseLogOptions(q); !errors.Is(err, ErrBadRequest) {
			t.Errorf("ParseLogOptions(%v) = %v, want ErrBadRequest", q, err)
		}
	}
}
