package agentapi

import (
	"errors"
	"fmt"
	"time"
)

// PathUsage takes a UsageReport from a joined device, authenticated with
// its certificate: the report is the device's own (the hub takes the name
// from the certificate, never from the body) and replaces the one before.
const PathUsage = "/usage/v1/report"

// AnnotationFilesystems on the NodeMetrics the hub serves holds the
// device's filesystems as its last report gave them: a JSON list of
// FilesystemUsage. The metrics API has no field for them; flotctl fleet
// status reads them there.
const AnnotationFilesystems = "usage.flotilla.dev/filesystems"

// MaxUsageReportBytes bounds a report's body: about 60 bytes a container,
// so 256 KiB holds thousands.
const MaxUsageReportBytes = 256 << 10

// UsageReport is what a device used over the window that ended at Time:
// CPU in nanocores (billionths of a core) averaged over the window,
// memory working set and filesystem bytes as of its end. The keys are
// short because every device sends one every interval.
type UsageReport struct {
	// Time is when the window ended, Window its length in milliseconds.
	Time     time.Time `json:"t"`
	WindowMS int64     `json:"w"`
	// IntervalS is how often the device reports, in seconds: the hub
	// takes a report older than a few intervals as stale.
	IntervalS int64 `json:"i"`
	// CPU (nanocores) and Memory (working set bytes) of the device.
	CPU    uint64 `json:"c"`
	Memory uint64 `json:"m"`
	// MemoryTotal is the device's memory, so that readers need not
	// look up its Node to tell how full it is.
	MemoryTotal uint64 `json:"mt,omitempty"`
	// Filesystems are the device's: its data dir's and containerd's.
	Filesystems []FilesystemUsage `json:"fs,omitempty"`
	Pods        []PodUsage        `json:"p,omitempty"`
}

// FilesystemUsage is one of the device's filesystems.
type FilesystemUsage struct {
	// Name is "data" (the agent's data dir) or "containerd" (its root).
	Name      string `json:"n"`
	Capacity  uint64 `json:"c"`
	Available uint64 `json:"a"`
}

// PodUsage is one pod's containers' usage.
type PodUsage struct {
	Namespace  string           `json:"ns"`
	Name       string           `json:"n"`
	Containers []ContainerUsage `json:"c"`
}

// ContainerUsage is one container's: CPU in nanocores, memory working
// set and writable layer in bytes (FS is absent when the snapshotter
// could not say).
type ContainerUsage struct {
	Name   string  `json:"n"`
	CPU    uint64  `json:"c"`
	Memory uint64  `json:"m"`
	FS     *uint64 `json:"f,omitempty"`
}

// Window is the report's window as a duration.
func (r *UsageReport) Window() time.Duration { return time.Duration(r.WindowMS) * time.Millisecond }

// Validate checks what the hub relies on: a time, a positive window and
// interval, and named pods and containers.
func (r *UsageReport) Validate() error {
	var errs []error
	if r.Time.IsZero() {
		errs = append(errs, errors.New("t (the window's end) is missing"))
	}
	if r.WindowMS <= 0 {
		errs = append(errs, fmt.Errorf("w (the window in milliseconds) must be > 0, not %d", r.WindowMS))
	}
	if r.IntervalS <= 0 {
		errs = append(errs, fmt.Errorf("i (the report interval in seconds) must be > 0, not %d", r.IntervalS))
	}
	for i, p := range r.Pods {
		if p.Namespace == "" || p.Name == "" {
			errs = append(errs, fmt.Errorf("p[%d]: a pod needs ns and n", i))
		}
		for j, c := range p.Containers {
			if c.Name == "" {
				errs = append(errs, fmt.Errorf("p[%d].c[%d]: a container needs n", i, j))
			}
		}
	}
	return errors.Join(errs...)
}
