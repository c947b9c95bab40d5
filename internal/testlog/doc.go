// Package testlog holds what tests write logs into: a buffer that the
// goroutines of the code under test may write while the test reads it, and
// after the test ended.
package testlog
