package testlog

import (
	"bytes"
	"sync"
)

// keep is how much of a long log a Buffer holds on to: its tail, once it
// has grown past twice as much.
const keep = 1 << 20

// Buffer is an io.Writer safe for concurrent use. It keeps the last MiB or
// more of what was written: a test shows the tail of a log, and a long
// test's debug log must not grow without bound.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 2*keep {
		b.buf.Next(b.buf.Len() - keep)
	}
	return b.buf.Write(p)
}

// String is what the buffer holds.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Tail is the last n bytes the buffer holds.
func (b *Buffer) Tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.buf.Bytes()
	return string(out[max(0, len(out)-n):])
}
