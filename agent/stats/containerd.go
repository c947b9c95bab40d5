package stats

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/api/types"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/typeurl/v2"

	"flotilla.dev/flotilla/agent/runtime"
)

// DefaultFSCacheTTL is how long a writable layer's size is kept.
const DefaultFSCacheTTL = time.Minute

// ContainerdSource reads the figures of the pods' containers from
// containerd.
type ContainerdSource struct {
	Client *containerd.Client
	// Namespace is containerd's namespace of the pods.
	Namespace string
	// FSCacheTTL: DefaultFSCacheTTL when zero.
	FSCacheTTL time.Duration
	Now        func() time.Time

	mu sync.Mutex
	fs map[string]fsUsage // by container ID
}

type fsUsage struct {
	size, inodes uint64
	ok           bool
	at           time.Time
}

var _ ContainerSource = (*ContainerdSource)(nil)

// Containers implements ContainerSource: the containers of pods that have
// a running task.
func (s *ContainerdSource) Containers(ctx context.Context) ([]ContainerStats, error) {
	ctx = namespaces.WithNamespace(ctx, s.Namespace)
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	resp, err := s.Client.TaskService().Metrics(ctx, &tasks.MetricsRequest{})
	if err != nil {
		return nil, fmt.Errorf("containerd task metrics: %w", err)
	}
	byID := make(map[string]*types.Metric, len(resp.Metrics))
	for _, m := range resp.Metrics {
		byID[m.ID] = m
	}
	list, err := s.Client.ContainerService().List(ctx, fmt.Sprintf("labels.%q", runtime.LabelPodUID))
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	var out []ContainerStats
	seen := map[string]bool{}
	for _, c := range list {
		m, ok := byID[c.ID]
		if !ok {
			continue // no running task
		}
		l := c.Labels
		cs := ContainerStats{
			Namespace: l[runtime.LabelPodNamespace], Pod: l[runtime.LabelPodName], PodUID: l[runtime.LabelPodUID],
			Container: l[runtime.LabelContainerName], ID: c.ID, Time: now(),
		}
		if m.Timestamp != nil {
			cs.Time = m.Timestamp.AsTime()
		}
		if err := decodeCgroupMetrics(m, &cs); err != nil {
			return nil, fmt.Errorf("container %s of pod %s/%s: %w", cs.Container, cs.Namespace, cs.Pod, err)
		}
		u := s.fsUsage(ctx, c.ID, c.Snapshotter, c.SnapshotKey, now())
		cs.FSUsed, cs.FSInodes, cs.HasFS = u.size, u.inodes, u.ok
		seen[c.ID] = true
		out = append(out, cs)
	}
	s.mu.Lock()
	for id := range s.fs {
		if !seen[id] {
			delete(s.fs, id)
		}
	}
	s.mu.Unlock()
	return out, nil
}

// fsUsage is the writable layer's size, read again once it is older than
// the TTL. A snapshotter that cannot say leaves HasFS false.
func (s *ContainerdSource) fsUsage(ctx context.Context, id, snapshotter, key string, now time.Time) fsUsage {
	ttl := s.FSCacheTTL
	if ttl <= 0 {
		ttl = DefaultFSCacheTTL
	}
	s.mu.Lock()
	u, ok := s.fs[id]
	s.mu.Unlock()
	if ok && now.Sub(u.at) < ttl {
		return u
	}
	u = fsUsage{at: now}
	if key != "" {
		if got, err := s.Client.SnapshotService(snapshotter).Usage(ctx, key); err == nil {
			u.size, u.inodes, u.ok = uint64(got.Size), uint64(got.Inodes), true
		}
	}
	s.mu.Lock()
	if s.fs == nil {
		s.fs = map[string]fsUsage{}
	}
	s.fs[id] = u
	s.mu.Unlock()
	return u
}

// decodeCgroupMetrics fills cs from a task's metrics, cgroup v1 or v2.
func decodeCgroupMetrics(m *types.Metric, cs *ContainerStats) error {
	if m.Data == nil {
		return fmt.Errorf("task %s has no metrics data", m.ID)
	}
	v, err := typeurl.UnmarshalAny(m.Data)
	if err != nil {
		return fmt.Errorf("decoding task %s's metrics (%s): %w", m.ID, m.Data.GetTypeUrl(), err)
	}
	switch s := v.(type) {
	case *v2.Metrics:
		cs.CPUNanos = s.GetCPU().GetUsageUsec() * 1000
		cs.MemoryUsage = s.GetMemory().GetUsage()
		cs.MemoryInactiveFile = s.GetMemory().GetInactiveFile()
	case *v1.Metrics:
		cs.CPUNanos = s.GetCPU().GetUsage().GetTotal()
		cs.MemoryUsage = s.GetMemory().GetUsage().GetUsage()
		cs.MemoryInactiveFile = s.GetMemory().GetTotalInactiveFile()
	default:
		return fmt.Errorf("task %s's metrics are a %T, neither cgroup v1 nor v2 stats", m.ID, v)
	}
	return nil
}
