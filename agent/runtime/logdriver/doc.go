// Package logdriver writes a container's stdout and stderr to a log file in
// the CRI log format, one line per entry:
//
//	2006-01-02T15:04:05.999999999Z07:00 stdout F the line
//
// ("P" marks a piece of a line longer than DefaultMaxLine; its last piece
// is "F"), rotating the file by size.
//
// It runs as containerd's "binary" logging driver (the flotilla-logger
// command in cmd/flotilla-logger): the runc shim starts it for each task
// with the container's stdout, stderr and a readiness pipe as fds 3, 4 and
// 5. Because the shim, not the agent, owns it, logging carries on while the
// agent restarts and a container never blocks on a full pipe that nobody
// reads.
package logdriver
