package stats

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"
)

// ContainerStats are one container's figures at one time.
type ContainerStats struct {
	Namespace, Pod, PodUID, Container string
	// ID is containerd's container ID: a restarted container is another.
	ID   string
	Time time.Time
	// CPUNanos is the CPU time used since the container started.
	CPUNanos uint64
	// MemoryUsage and MemoryInactiveFile are the cgroup's; WorkingSet
	// is the one less the other.
	MemoryUsage, MemoryInactiveFile uint64
	// FSUsed is the size of the container's writable layer, FSInodes its
	// inodes; HasFS is false when the snapshotter could not say.
	FSUsed, FSInodes uint64
	HasFS            bool
}

// WorkingSet is usage less inactive_file, as the kubelet reports it.
func (c ContainerStats) WorkingSet() uint64 { return WorkingSet(c.MemoryUsage, c.MemoryInactiveFile) }

// WorkingSet is usage less inactive file pages, never below zero.
func WorkingSet(usage, inactiveFile uint64) uint64 {
	if inactiveFile >= usage {
		return 0
	}
	return usage - inactiveFile
}

// Filesystem is one filesystem the device's figures cover.
type Filesystem struct {
	// Name says what it holds: "data" (the agent's data dir) or
	// "containerd" (containerd's root).
	Name, Path                string
	Capacity, Available, Used uint64
	Inodes, InodesFree        uint64
}

// NodeStats are the device's own figures at one time.
type NodeStats struct {
	Time time.Time
	// CPUNanos is the CPU time every CPU spent busy since boot.
	CPUNanos uint64
	// MemoryTotal, MemoryAvailable and MemoryUsage (total - free) from
	// /proc/meminfo; MemoryWorkingSet is usage less Inactive(file).
	MemoryTotal, MemoryAvailable, MemoryUsage, MemoryWorkingSet uint64
	Filesystems                                                 []Filesystem
}

// Snapshot is everything read at once.
type Snapshot struct {
	Node       NodeStats
	Containers []ContainerStats
}

// ContainerSource reads the containers' figures.
type ContainerSource interface {
	Containers(ctx context.Context) ([]ContainerStats, error)
}

// NodeSource reads the device's figures.
type NodeSource interface {
	Node(ctx context.Context) (NodeStats, error)
}

// Collector reads a Snapshot from its sources.
type Collector struct {
	Containers ContainerSource
	Node       NodeSource
}

// Collect reads both sources. A failure of one still returns what the
// other read, with the error.
func (c *Collector) Collect(ctx context.Context) (Snapshot, error) {
	var s Snapshot
	var errs []error
	n, err := c.Node.Node(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("device figures: %w", err))
	} else {
		s.Node = n
	}
	if c.Containers != nil {
		cs, err := c.Containers.Containers(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("container figures: %w", err))
		}
		sort.Slice(cs, func(i, j int) bool {
			a, b := cs[i], cs[j]
			if a.Namespace != b.Namespace {
				return a.Namespace < b.Namespace
			}
			if a.Pod != b.Pod {
				return a.Pod < b.Pod
			}
			return a.Container < b.Container
		})
		s.Containers = cs
	}
	return s, errors.Join(errs...)
}
