package logdriver

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func readEntries(t *testing.T, path string) []Entry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Entry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		e, err := ParseLine(append([]byte(nil), sc.Bytes()...))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func TestCopyWritesCRIFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	l, err := Open(path, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	fixed := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	l.now = func() time.Time { return fixed }
	in := "first\n" + strings.Repeat("x", 20) + "\nno newline"
	if err := Copy(l, "stderr", strings.NewReader(in), 16); err != nil {
		t.Fatal(err)
	}
	l.Close()
	raw, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(raw), "2026-01-02T03:04:05.000000006Z stderr F first\n") {
		t.Fatalf("log = %q", raw)
	}
	es := readEntries(t, path)
	want := []struct {
		partial bool
		content string
	}{{false, "first"}, {true, strings.Repeat("x", 16)}, {false, "xxxx"}, {false, "no newline"}}
	if len(es) != len(want) {
		t.Fatalf("entries = %+v", es)
	}
	for i, w := range want {
		if es[i].Partial != w.partial || string(es[i].Content) != w.content || es[i].Stream != "stderr" || !es[i].Time.Equal(fixed) {
			t.Errorf("entry %d = %+v, want %+v", i, es[i], w)
		}
	}
}

func TestRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	l, err := Open(path, 200, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		if err := l.WriteEntry("stdout", false, []byte("line of some length")); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	for _, p := range []string{path, path + ".1", path + ".2"} {
		st, err := os.Stat(p)
		if err != nil || st.Size() > 200 || st.Size() == 0 {
			t.Errorf("%s: %v, size %d", p, err, st.Size())
		}
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Error("kept more files than max-files")
	}
}

func TestParseLineRejects(t *testing.T) {
	for _, bad := range []string{"", "nonsense", "2026-01-02T03:04:05Z stdin F x", "2026-01-02T03:04:05Z stdout X x", "yesterday stdout F x"} {
		if _, err := ParseLine([]byte(bad)); !errors.Is(err, ErrBadLine) {
			t.Errorf("%q: err = %v", bad, err)
		}
	}
	e, err := ParseLine([]byte("2026-01-02T03:04:05Z stdout F"))
	if err != nil || len(e.Content) != 0 {
		t.Errorf("empty line: %+v %v", e, err)
	}
}

// TestBinaryProtocol runs the real command the way the runc shim does:
// stdout, stderr and the readiness pipe as fds 3, 4, 5.
func TestBinaryProtocol(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "flotilla-logger")
	if out, err := exec.Command("go", "build", "-o", bin, "flotilla.dev/flotilla/cmd/flotilla-logger").CombinedOutput(); err != nil {
		t.Fatalf("build: %v: %s", err, out)
	}
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	readyR, readyW, _ := os.Pipe()
	logPath := filepath.Join(dir, "pod", "c", "0.log")
	cmd := exec.Command(bin, ArgMaxFiles, "2", ArgPath, logPath, ArgMaxSize, "1000000")
	cmd.ExtraFiles = []*os.File{outR, errR, readyW}
	var diag bytes.Buffer
	cmd.Stderr = &diag
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outR.Close()
	errR.Close()
	readyW.Close()
	// The logger is ready when it closes its end of the readiness pipe.
	if n, _ := readyR.Read(make([]byte, 1)); n != 0 {
		t.Fatal("readiness pipe carried data")
	}
	outW.WriteString("hello out\n")
	errW.WriteString("hello err\n")
	outW.Close()
	errW.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("logger: %v: %s", err, diag.String())
	}
	got := map[string]string{}
	for _, e := range readEntries(t, logPath) {
		got[e.Stream] = string(e.Content)
	}
	if got["stdout"] != "hello out" || got["stderr"] != "hello err" {
		t.Fatalf("entries = %v", got)
	}
}
