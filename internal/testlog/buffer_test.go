package testlog_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"flotilla.dev/flotilla/internal/testlog"
)

// TestBufferKeepsTheTail: written from many goroutines, the buffer holds
// every line whole while small, and only the most recent ones once long.
func TestBufferKeepsTheTail(t *testing.T) {
	var b testlog.Buffer
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				fmt.Fprintf(&b, "g%d line %d\n", g, i)
			}
		}()
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 800 {
		t.Fatalf("%d lines, want 800", n)
	}
	if got := b.Tail(4); len(got) != 4 || !strings.HasSuffix(got, "\n") {
		t.Errorf("Tail(4) = %q", got)
	}
	line := strings.Repeat("x", 1023) + "\n"
	for range 5 << 10 { // 5 MiB
		b.Write([]byte(line))
	}
	b.Write([]byte("last\n"))
	s := b.String()
	if len(s) > 3<<20 || len(s) < 1<<20 {
		t.Errorf("after 5 MiB the buffer holds %d bytes, want between 1 and 3 MiB", len(s))
	}
	if !strings.HasSuffix(s, "last\n") || !strings.HasSuffix(b.Tail(100), "last\n") {
		t.Error("the most recent line is not kept")
	}
}
