package stats

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"flotilla.dev/flotilla/api/agentapi"
)

// DefaultReportInterval is how often a device reports its usage.
const DefaultReportInterval = 60 * time.Second

// Reporter sends the hub a UsageReport every Interval: the usage over
// the window since the one before. A report that cannot be sent is
// dropped, not queued: the hub serves current usage, and the next one
// replaces it anyway.
type Reporter struct {
	Collector *Collector
	// Post sends a report's body to the hub (agentapi.PathUsage).
	Post     func(ctx context.Context, body []byte) error
	Interval time.Duration
	Log      *slog.Logger
}

// Run reports until ctx ends.
func (r *Reporter) Run(ctx context.Context) error {
	interval := r.Interval
	if interval <= 0 {
		interval = DefaultReportInterval
	}
	log := r.Log
	if log == nil {
		log = slog.Default()
	}
	prev, err := r.Collector.Collect(ctx)
	if err != nil {
		log.Warn("reading usage failed; the first report may lack figures", "err", err)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cur, err := r.Collector.Collect(ctx)
		if err != nil {
			log.Warn("reading usage failed; reporting what was read", "err", err)
		}
		if cur.Node.Time.IsZero() || prev.Node.Time.IsZero() {
			prev = cur
			continue
		}
		body, err := json.Marshal(ReportOf(Rates(prev, cur), interval))
		prev = cur
		if err != nil {
			return fmt.Errorf("encoding the usage report: %w", err)
		}
		if err := r.Post(ctx, body); err != nil && ctx.Err() == nil {
			log.Warn("sending the usage report failed; the next one replaces it", "err", err)
		}
	}
}

// ReportOf is the report of u for a device reporting every interval.
func ReportOf(u Usage, interval time.Duration) agentapi.UsageReport {
	r := agentapi.UsageReport{
		Time: u.Time.UTC(), WindowMS: u.Window.Milliseconds(), IntervalS: int64(max(interval/time.Second, 1)),
		CPU: u.NodeCPUNanoCores, Memory: u.NodeMemoryWorkingSet, MemoryTotal: u.NodeMemoryTotal,
	}
	for _, fs := range u.Filesystems {
		r.Filesystems = append(r.Filesystems, agentapi.FilesystemUsage{Name: fs.Name, Capacity: fs.Capacity, Available: fs.Available})
	}
	for _, p := range u.Pods {
		pu := agentapi.PodUsage{Namespace: p.Namespace, Name: p.Name}
		for _, c := range p.Containers {
			cu := agentapi.ContainerUsage{Name: c.Name, CPU: c.CPUNanoCores, Memory: c.MemoryWorkingSet}
			if c.HasFS {
				fs := c.FSUsed
				cu.FS = &fs
			}
			pu.Containers = append(pu.Containers, cu)
		}
		r.Pods = append(r.Pods, pu)
	}
	return r
}
