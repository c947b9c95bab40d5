// Package stats reads what the device and its pods use: per container
// CPU (cumulative), memory working set and the writable layer's size, and
// the device's own CPU, memory and filesystems.
//
// # Figures
//
// Memory working set is what the kubelet calls it: usage minus
// inactive_file (page cache the kernel can drop first), never below zero.
// CPU is kept cumulative (nanoseconds); Rates turns two snapshots into
// nanocores over the window between them — a counter that went back (a
// container restarted within the window) counts from zero. A pod's figures
// are the sums of its containers' (the sandbox's pause is not counted).
//
// Containers come from containerd (ContainerdSource): one Metrics call for
// every task of the namespace, decoded from cgroup v1 or v2 stats, and
// the snapshotter's usage of each container's writable layer — a walk of
// the layer on overlayfs, so it is kept for FSCacheTTL rather than read on
// every scrape. emptyDir volumes are not counted: they would need a walk
// of every volume.
//
// The device comes from HostSource: CPU from the root cgroup's cpu.stat
// on cgroup v2 (/proc/stat otherwise), memory from /proc/meminfo (usage
// is MemTotal - MemFree, working set that less Inactive(file)), and
// statfs of the filesystems it is given (the agent's data dir and
// containerd's root).
//
// Collector reads both on demand: the Prometheus collector (Metrics)
// reads it when /metrics is scraped, and the Reporter every interval to
// send the hub an agentapi.UsageReport (the usage over the window since
// its previous reading) — no loop reads figures nobody asked for.
package stats
