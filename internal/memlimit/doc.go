// Package memlimit chooses the Go runtime's soft memory limit for a
// daemon (runtime/debug.SetMemoryLimit): given in bytes by its operator,
// derived from the memory limit of the cgroup it runs in, or left to the
// GOMEMLIMIT environment variable, which the runtime reads itself and
// which wins.
//
// Without a limit the garbage collector lets the heap grow to twice what
// is live (GOGC=100) before it collects. A hub holding 10,000 devices'
// connections has a large live heap, so that headroom is hundreds of MB
// of memory that nothing uses. Under a limit the collector works harder
// as the heap nears it instead: memory for CPU, where the machine has
// CPU to spare. It is a soft limit: when the live heap itself exceeds
// it, the process goes over rather than fail (the runtime caps the time
// the collector may take at about half the CPU).
//
// The cgroup's limit (memory.max of cgroup v2, memory.limit_in_bytes of
// v1's memory controller, the smallest of the process's cgroup and its
// ancestors) is a hard one: the kernel's OOM killer ends the process at
// it. The derived soft limit is CgroupRatio of it, leaving the rest for
// what the collector does not count (the binary's pages, C libraries,
// the kernel's buffers charged to the cgroup).
package memlimit
