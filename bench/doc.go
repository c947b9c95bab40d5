// Package bench holds the drivers behind `make bench`: each measures one
// figure of DESIGN.md's targets and returns it; cmd/flotilla-bench runs
// them and prints one line per figure. Nothing here is a test: no figure
// is asserted anywhere.
package bench
