package stats

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/typeurl/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"flotilla.dev/flotilla/api/agentapi"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type fakeContainers struct {
	cs  []ContainerStats
	err error
}

func (f *fakeContainers) Containers(context.Context) ([]ContainerStats, error) { return f.cs, f.err }

type fakeNode struct{ n NodeStats }

func (f *fakeNode) Node(context.Context) (NodeStats, error) { return f.n, nil }

func ctr(pod, name, id string, at time.Time, cpu, mem, inactive uint64) ContainerStats {
	return ContainerStats{Namespace: "default", Pod: pod, PodUID: "uid-" + pod, Container: name, ID: id, Time: at,
		CPUNanos: cpu, MemoryUsage: mem, MemoryInactiveFile: inactive}
}

func TestWorkingSet(t *testing.T) {
	for _, c := range []struct{ usage, inactive, want uint64 }{{100, 30, 70}, {100, 100, 0}, {10, 50, 0}, {5, 0, 5}} {
		if got := WorkingSet(c.usage, c.inactive); got != c.want {
			t.Errorf("WorkingSet(%d, %d) = %d, want %d", c.usage, c.inactive, got, c.want)
		}
	}
}

func TestRates(t *testing.T) {
	prev := Snapshot{
		Node: NodeStats{Time: t0, CPUNanos: 10e9},
		Containers: []ContainerStats{
			ctr("web", "app", "a1", t0, 1e9, 0, 0),
			ctr("web", "side", "s1", t0, 5e9, 0, 0),
			ctr("gone", "x", "g1", t0, 1e9, 0, 0),
		},
	}
	t1 := t0.Add(10 * time.Second)
	cur := Snapshot{
		Node: NodeStats{Time: t1, CPUNanos: 25e9, MemoryWorkingSet: 700, MemoryTotal: 1000},
		Containers: []ContainerStats{
			ctr("web", "app", "a1", t1, 6e9, 300, 100), // 5 s of CPU in 10 s: half a core
			ctr("web", "side", "s2", t1, 2e9, 50, 0),   // restarted: 2 s since
			ctr("new", "y", "n1", t1, 1e9, 10, 20),     // started within the window
		},
	}
	u := Rates(prev, cur)
	if u.Window != 10*time.Second || u.NodeCPUNanoCores != 1.5e9 || u.NodeMemoryWorkingSet != 700 || u.NodeMemoryTotal != 1000 {
		t.Errorf("node: window %v, cpu %d, mem %d, total %d; want 10s, 1.5e9, 700, 1000", u.Window, u.NodeCPUNanoCores, u.NodeMemoryWorkingSet, u.NodeMemoryTotal)
	}
	if len(u.Pods) != 2 {
		t.Fatalf("pods = %+v, want web and new (gone ended)", u.Pods)
	}
	web := u.Pods[0]
	if web.Name != "web" || len(web.Containers) != 2 {
		t.Fatalf("pod 0 = %+v", web)
	}
	if c := web.Containers[0]; c.CPUNanoCores != 5e8 || c.MemoryWorkingSet != 200 {
		t.Errorf("app = %+v, want 5e8 nanocores and 200 bytes", c)
	}
	if c := web.Containers[1]; c.CPUNanoCores != 2e8 {
		t.Errorf("restarted side = %+v, want 2e8 nanocores (2 s over 10 s)", c)
	}
	if c := u.Pods[1].Containers[0]; c.CPUNanoCores != 1e8 || c.MemoryWorkingSet != 0 {
		t.Errorf("new = %+v, want 1e8 nanocores and a working set floored at 0", c)
	}
}

func TestRateOfACounterThatWentBack(t *testing.T) {
	if got := rate(10, 4, 2*time.Second); got != 2 {
		t.Errorf("rate(10, 4, 2s) = %d, want 2", got)
	}
	if got := rate(0, 4, 0); got != 0 {
		t.Errorf("rate over no window = %d, want 0", got)
	}
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const meminfo = "MemTotal:       1000 kB\nMemFree:         200 kB\nMemAvailable:    600 kB\nInactive(file):  300 kB\n"

func TestHostSource(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"proc/meminfo": meminfo,
		"proc/stat":    "cpu  100 20 30 1000 50 5 5 10 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n",
		"cg/cpu.stat":  "usage_usec 4000000\nuser_usec 1\n",
	})
	statfs := func(path string, st *unix.Statfs_t) error {
		if path != "/data" {
			return errors.New("no such filesystem")
		}
		*st = unix.Statfs_t{Bsize: 4096, Blocks: 100, Bfree: 40, Bavail: 30, Files: 10, Ffree: 4}
		return nil
	}
	h := &HostSource{Proc: filepath.Join(dir, "proc"), Cgroup: filepath.Join(dir, "cg"), Now: func() time.Time { return t0 }, Statfs: statfs,
		Filesystems: []FilesystemPath{{"data", "/data"}, {"containerd", "/missing"}}}
	n, err := h.Node(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n.CPUNanos != 4e9 {
		t.Errorf("CPU from the root cgroup = %d, want 4e9", n.CPUNanos)
	}
	if n.MemoryTotal != 1000<<10 || n.MemoryUsage != 800<<10 || n.MemoryWorkingSet != 500<<10 || n.MemoryAvailable != 600<<10 {
		t.Errorf("memory = %+v, want total 1000 KiB, usage 800, working set 500, available 600", n)
	}
	if len(n.Filesystems) != 1 || n.Filesystems[0] != (Filesystem{Name: "data", Path: "/data", Capacity: 409600, Available: 122880, Used: 245760, Inodes: 10, InodesFree: 4}) {
		t.Errorf("filesystems = %+v", n.Filesystems)
	}
	// Without the root cgroup's cpu.stat (cgroup v1), /proc/stat's busy
	// times: user nice system irq softirq steal = 170 ticks.
	h.Cgroup = filepath.Join(dir, "none")
	if n, err = h.Node(context.Background()); err != nil || n.CPUNanos != 1.7e9 {
		t.Errorf("CPU from /proc/stat = %d, %v; want 1.7e9", n.CPUNanos, err)
	}
	h.Proc = filepath.Join(dir, "none")
	if _, err := h.Node(context.Background()); err == nil {
		t.Error("no error without /proc")
	}
}

func TestDecodeCgroupMetrics(t *testing.T) {
	for _, c := range []struct {
		name string
		data any
	}{
		{"v2", &v2.Metrics{CPU: &v2.CPUStat{UsageUsec: 3}, Memory: &v2.MemoryStat{Usage: 500, InactiveFile: 100}}},
		{"v1", &v1.Metrics{CPU: &v1.CPUStat{Usage: &v1.CPUUsage{Total: 3000}}, Memory: &v1.MemoryStat{Usage: &v1.MemoryEntry{Usage: 500}, TotalInactiveFile: 100}}},
	} {
		a, err := typeurl.MarshalAnyToProto(c.data)
		if err != nil {
			t.Fatal(err)
		}
		var cs ContainerStats
		if err := decodeCgroupMetrics(&types.Metric{ID: "x", Data: a}, &cs); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cs.CPUNanos != 3000 || cs.MemoryUsage != 500 || cs.WorkingSet() != 400 {
			t.Errorf("%s: %+v, want 3000 ns of CPU and a working set of 400", c.name, cs)
		}
	}
	a, _ := typeurl.MarshalAnyToProto(&types.Metric{ID: "not stats"})
	if err := decodeCgroupMetrics(&types.Metric{ID: "x", Data: a}, &ContainerStats{}); err == nil || !strings.Contains(err.Error(), "neither cgroup v1 nor v2") {
		t.Errorf("other data: %v", err)
	}
}

func TestMetrics(t *testing.T) {
	c := &Collector{
		Node: &fakeNode{NodeStats{Time: t0, CPUNanos: 2e9, MemoryWorkingSet: 700,
			Filesystems: []Filesystem{{Name: "data", Path: "/data", Capacity: 100, Available: 30}}}},
		Containers: &fakeContainers{cs: []ContainerStats{
			ctr("web", "app", "a1", t0, 1.5e9, 300, 100),
			ctr("web", "side", "s1", t0, 0.5e9, 50, 0),
		}},
	}
	c.Containers.(*fakeContainers).cs[0].FSUsed, c.Containers.(*fakeContainers).cs[0].HasFS = 4096, true
	want := `
# HELP container_cpu_usage_seconds_total Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="app",namespace="default",pod="web"} 1.5
container_cpu_usage_seconds_total{container="side",namespace="default",pod="web"} 0.5
# HELP container_fs_usage_bytes Bytes used by the container's writable layer
# TYPE container_fs_usage_bytes gauge
container_fs_usage_bytes{container="app",namespace="default",pod="web"} 4096
# HELP container_memory_working_set_bytes Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="app",namespace="default",pod="web"} 200
container_memory_working_set_bytes{container="side",namespace="default",pod="web"} 50
# HELP node_cpu_usage_seconds_total Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 2
# HELP node_filesystem_avail_bytes Bytes of a filesystem the agent uses still available to unprivileged users
# TYPE node_filesystem_avail_bytes gauge
node_filesystem_avail_bytes{filesystem="data",path="/data"} 30
# HELP node_memory_working_set_bytes Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 700
# HELP pod_cpu_usage_seconds_total Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="default",pod="web"} 2
# HELP pod_memory_working_set_bytes Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{namespace="default",pod="web"} 250
# HELP scrape_error 1 if there was an error while getting container metrics, 0 otherwise
# TYPE scrape_error gauge
scrape_error 0
`
	names := []string{"container_cpu_usage_seconds_total", "container_fs_usage_bytes", "container_memory_working_set_bytes",
		"node_cpu_usage_seconds_total", "node_filesystem_avail_bytes", "node_memory_working_set_bytes",
		"pod_cpu_usage_seconds_total", "pod_memory_working_set_bytes", "scrape_error"}
	if err := testutil.CollectAndCompare(Metrics{C: c}, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	// A failing source shows as scrape_error 1, with what was read.
	c.Containers.(*fakeContainers).err = errors.New("containerd is down")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(Metrics{C: c})
	if err := testutil.GatherAndCompare(reg, strings.NewReader("# HELP scrape_error 1 if there was an error while getting container metrics, 0 otherwise\n# TYPE scrape_error gauge\nscrape_error 1\n"), "scrape_error"); err != nil {
		t.Error(err)
	}
}

func TestReportOf(t *testing.T) {
	fs := uint64(4096)
	u := Usage{Time: t0, Window: 1500 * time.Millisecond, NodeCPUNanoCores: 7, NodeMemoryWorkingSet: 8, NodeMemoryTotal: 9,
		Filesystems: []Filesystem{{Name: "data", Capacity: 100, Available: 30, Used: 70}},
		Pods: []PodUsage{{Namespace: "ns", Name: "p", Containers: []ContainerUsage{
			{Name: "a", CPUNanoCores: 1, MemoryWorkingSet: 2, FSUsed: fs, HasFS: true}, {Name: "b", CPUNanoCores: 3, MemoryWorkingSet: 4},
		}}}}
	b, err := json.Marshal(ReportOf(u, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"t":"2026-01-02T03:04:05Z","w":1500,"i":60,"c":7,"m":8,"mt":9,"fs":[{"n":"data","c":100,"a":30}],"p":[{"ns":"ns","n":"p","c":[{"n":"a","c":1,"m":2,"f":4096},{"n":"b","c":3,"m":4}]}]}`
	if string(b) != want {
		t.Errorf("report =\n%s\nwant\n%s", b, want)
	}
	var r agentapi.UsageReport
	if err := json.Unmarshal(b, &r); err != nil || r.Validate() != nil {
		t.Errorf("the report does not read back valid: %v, %v", err, r.Validate())
	}
}

type clock struct{ now time.Time }

func (c *clock) Node(context.Context) (NodeStats, error) {
	c.now = c.now.Add(time.Second)
	return NodeStats{Time: c.now, CPUNanos: uint64(c.now.Sub(t0))}, nil
}

func TestReporterSendsTheWindowSinceTheLastReading(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan agentapi.UsageReport, 2)
	fails := 1
	r := &Reporter{
		Collector: &Collector{Node: &clock{now: t0}},
		Interval:  10 * time.Millisecond,
		Post: func(_ context.Context, body []byte) error {
			var rep agentapi.UsageReport
			if err := json.Unmarshal(body, &rep); err != nil {
				t.Error(err)
			}
			if fails > 0 { // a lost report is dropped; the next is sent
				fails--
				return errors.New("hub away")
			}
			got <- rep
			cancel()
			return nil
		},
	}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	rep := <-got
	// Every reading is a second later and a second of CPU more.
	if rep.WindowMS != 1000 || rep.CPU != 1e9 || rep.IntervalS != 1 || !rep.Time.Equal(t0.Add(3*time.Second)) {
		t.Errorf("report = %+v, want the window between the second and the third reading: 1 s, one core", rep)
	}
}
