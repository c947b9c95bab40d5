package tunnel

// SetMaxQueued sets what an answer may have waiting for its reader.
func SetMaxQueued(n int) (restore func()) {
	old := maxQueued
	maxQueued = n
	return func() { maxQueued = old }
}
