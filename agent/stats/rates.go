package stats

import "time"

// ContainerUsage is one container's usage over a window.
type ContainerUsage struct {
	Name string
	// CPUNanoCores is the CPU used over the window, in billionths of a
	// core.
	CPUNanoCores uint64
	// MemoryWorkingSet and FSUsed are as of the window's end.
	MemoryWorkingSet uint64
	FSUsed           uint64
	HasFS            bool
}

// PodUsage is one pod's containers' usage.
type PodUsage struct {
	Namespace, Name, UID string
	Containers           []ContainerUsage
}

// Usage is what the device and its pods used over a window ending at
// Time.
type Usage struct {
	Time   time.Time
	Window time.Duration
	// The device's CPU (nanocores over the window) and memory working set.
	NodeCPUNanoCores, NodeMemoryWorkingSet uint64
	NodeMemoryTotal                        uint64
	Filesystems                            []Filesystem
	Pods                                   []PodUsage
}

// Rates is the usage between two snapshots of the same device, prev
// taken before cur. Containers are the ones cur has (prev's that are gone
// ended within the window); a container prev does not know, or whose
// counter went back, started within the window and counts from zero.
func Rates(prev, cur Snapshot) Usage {
	u := Usage{
		Time:                 cur.Node.Time,
		Window:               cur.Node.Time.Sub(prev.Node.Time),
		NodeMemoryWorkingSet: cur.Node.MemoryWorkingSet,
		NodeMemoryTotal:      cur.Node.MemoryTotal,
		Filesystems:          cur.Node.Filesystems,
	}
	u.NodeCPUNanoCores = rate(prev.Node.CPUNanos, cur.Node.CPUNanos, u.Window)
	before := make(map[string]ContainerStats, len(prev.Containers))
	for _, c := range prev.Containers {
		before[c.ID] = c
	}
	index := map[string]int{}
	for _, c := range cur.Containers {
		var used uint64
		if p, ok := before[c.ID]; ok {
			used = rate(p.CPUNanos, c.CPUNanos, c.Time.Sub(p.Time))
		} else {
			used = rate(0, c.CPUNanos, u.Window)
		}
		i, ok := index[c.PodUID]
		if !ok {
			i = len(u.Pods)
			index[c.PodUID] = i
			u.Pods = append(u.Pods, PodUsage{Namespace: c.Namespace, Name: c.Pod, UID: c.PodUID})
		}
		u.Pods[i].Containers = append(u.Pods[i].Containers, ContainerUsage{
			Name: c.Container, CPUNanoCores: used, MemoryWorkingSet: c.WorkingSet(), FSUsed: c.FSUsed, HasFS: c.HasFS,
		})
	}
	return u
}

// rate is the counter's increase per second of the window in billionths
// (nanoseconds of CPU per second are nanocores). A counter that went back
// was restarted: its whole value is the increase.
func rate(prev, cur uint64, window time.Duration) uint64 {
	if window <= 0 {
		return 0
	}
	d := cur - prev
	if cur < prev {
		d = cur
	}
	return uint64(float64(d) * float64(time.Second) / float64(window))
}
