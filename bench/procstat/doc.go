// Package procstat reads a process's memory and CPU time from /proc, for
// the benchmarks that measure the hub, the agent and the fleet simulator.
package procstat
