package fleet

import (
	"encoding/json"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"flotilla.dev/flotilla/api/agentapi"
)

// A device is running low when its usage crosses one of these: CPU or
// memory working set at or above the share of its capacity, or a
// filesystem (its data dir's or containerd's) with less free than the
// share — the kubelet's default disk eviction threshold.
const (
	LowCPUPercent      = 90
	LowMemoryPercent   = 90
	LowDiskFreePercent = 10
)

// Usage is a device's last reported usage, as percentages of its
// capacity (-1 when unknown).
type Usage struct {
	Known bool
	// CPUPercent and MemoryPercent are of the Node's capacity.
	CPUPercent, MemoryPercent int
	// DiskPercent is the fullest filesystem's used share.
	DiskPercent int
	// Low says what is running low, empty when nothing is.
	Low []string
}

// usageOf computes a device's usage from its NodeMetrics.
func usageOf(n *corev1.Node, m *metricsv1beta1.NodeMetrics) Usage {
	u := Usage{Known: true, CPUPercent: -1, MemoryPercent: -1, DiskPercent: -1}
	percent := func(used, capacity int64) int {
		if capacity <= 0 {
			return -1
		}
		return int(used * 100 / capacity)
	}
	if c, ok := n.Status.Capacity[corev1.ResourceCPU]; ok {
		u.CPUPercent = percent(m.Usage.Cpu().MilliValue(), c.MilliValue())
	}
	if c, ok := n.Status.Capacity[corev1.ResourceMemory]; ok {
		u.MemoryPercent = percent(m.Usage.Memory().Value(), c.Value())
	}
	if u.CPUPercent >= LowCPUPercent {
		u.Low = append(u.Low, fmt.Sprintf("CPU %d%%", u.CPUPercent))
	}
	if u.MemoryPercent >= LowMemoryPercent {
		u.Low = append(u.Low, fmt.Sprintf("memory %d%%", u.MemoryPercent))
	}
	var fss []agentapi.FilesystemUsage
	if raw := m.Annotations[agentapi.AnnotationFilesystems]; raw != "" {
		_ = json.Unmarshal([]byte(raw), &fss) // figures of another version are left out
	}
	sort.Slice(fss, func(i, j int) bool { return fss[i].Name < fss[j].Name })
	seen := map[uint64]bool{}
	for _, fs := range fss {
		if fs.Capacity == 0 {
			continue
		}
		used := int((fs.Capacity - min(fs.Available, fs.Capacity)) * 100 / fs.Capacity)
		u.DiskPercent = max(u.DiskPercent, used)
		// The data dir and containerd's root are often one filesystem.
		if key := fs.Capacity ^ fs.Available<<1; !seen[key] && fs.Available*100 < fs.Capacity*LowDiskFreePercent {
			seen[key] = true
			u.Low = append(u.Low, fmt.Sprintf("disk %s %d%% free", fs.Name, fs.Available*100/fs.Capacity))
		}
	}
	return u
}
