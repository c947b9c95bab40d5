package main

import (
	"runtime/debug"
	"testing"
)

func TestParseMemoryLimit(t *testing.T) {
	for in, want := range map[string]int64{
		"64MiB": 64 << 20, "1GiB": 1 << 30, "20000000": 20000000, "20000000B": 20000000,
		"40960KiB": 40 << 20, " 48MiB ": 48 << 20, "1TiB": 1 << 40, "off": 0,
	} {
		if got, err := parseMemoryLimit(in); err != nil || got != want {
			t.Errorf("parseMemoryLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "64MB", "64 MiB", "-1MiB", "0", "1MiB", "lots", "9999999999TiB", "1.5GiB"} {
		if got, err := parseMemoryLimit(in); err == nil {
			t.Errorf("parseMemoryLimit(%q) = %d, want an error", in, got)
		}
	}
}

func TestApplyMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	if err := applyMemoryLimit("48MiB"); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != 48<<20 {
		t.Errorf("limit %d after 48MiB", got)
	}
	// off leaves what the runtime has.
	if err := applyMemoryLimit("off"); err != nil || debug.SetMemoryLimit(-1) != 48<<20 {
		t.Errorf("off changed the limit (%v)", err)
	}
	if err := applyMemoryLimit("lots"); err == nil {
		t.Error("a bad limit was applied")
	}
}
