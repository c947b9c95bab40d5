package main

import (
	"bytes"
	"log/slog"
	"math"
	"runtime/debug"
	"strings"
	"testing"
)

// serve gives the runtime the --memory-limit and logs it; GOMEMLIMIT,
// which the runtime read at start, is left alone and logged as the
// source.
func TestSetMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	t.Setenv("GOMEMLIMIT", "")

	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if err := setMemoryLimit("768Mi", log); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != 768<<20 {
		t.Errorf("runtime limit %d after --memory-limit 768Mi, want %d", got, 768<<20)
	}
	if !strings.Contains(logs.String(), `msg="memory limit" limit=768MiB bytes=805306368 from=--memory-limit`) {
		t.Errorf("log %q does not say the limit and where it came from", logs.String())
	}

	// As if the runtime had read GOMEMLIMIT=300MiB when it started.
	debug.SetMemoryLimit(300 << 20)
	t.Setenv("GOMEMLIMIT", "300MiB")
	logs.Reset()
	if err := setMemoryLimit("1Gi", log); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != 300<<20 {
		t.Errorf("runtime limit %d with GOMEMLIMIT=300MiB and --memory-limit 1Gi, want GOMEMLIMIT's %d", got, 300<<20)
	}
	if !strings.Contains(logs.String(), "limit=300MiB") || !strings.Contains(logs.String(), `from="GOMEMLIMIT=300MiB"`) {
		t.Errorf("log %q does not say GOMEMLIMIT set the limit", logs.String())
	}

	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "")
	logs.Reset()
	if err := setMemoryLimit("0", log); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("runtime limit %d with --memory-limit 0, want none", got)
	}
	if !strings.Contains(logs.String(), "no memory limit") {
		t.Errorf("log %q does not say there is no limit", logs.String())
	}
	if err := setMemoryLimit("12", log); err == nil || !strings.Contains(err.Error(), "--memory-limit") {
		t.Errorf("--memory-limit 12: %v, want an error naming the flag", err)
	}
}
