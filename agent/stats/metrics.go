package stats

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The kubelet's resource metrics (/metrics/resource), by the same names
// and labels, and cAdvisor's container_fs_usage_bytes; the filesystems
// have no kubelet name and take node_exporter's.
var (
	descNodeCPU      = prometheus.NewDesc("node_cpu_usage_seconds_total", "Cumulative cpu time consumed by the node in core-seconds", nil, nil)
	descNodeMemory   = prometheus.NewDesc("node_memory_working_set_bytes", "Current working set of the node in bytes", nil, nil)
	descFSSize       = prometheus.NewDesc("node_filesystem_size_bytes", "Size of a filesystem the agent uses, in bytes (filesystem: data is the agent's data dir, containerd containerd's root)", []string{"filesystem", "path"}, nil)
	descFSAvail      = prometheus.NewDesc("node_filesystem_avail_bytes", "Bytes of a filesystem the agent uses still available to unprivileged users", []string{"filesystem", "path"}, nil)
	descPodCPU       = prometheus.NewDesc("pod_cpu_usage_seconds_total", "Cumulative cpu time consumed by the pod in core-seconds", []string{"pod", "namespace"}, nil)
	descPodMemory    = prometheus.NewDesc("pod_memory_working_set_bytes", "Current working set of the pod in bytes", []string{"pod", "namespace"}, nil)
	descContainerCPU = prometheus.NewDesc("container_cpu_usage_seconds_total", "Cumulative cpu time consumed by the container in core-seconds", []string{"container", "pod", "namespace"}, nil)
	descContainerMem = prometheus.NewDesc("container_memory_working_set_bytes", "Current working set of the container in bytes", []string{"container", "pod", "namespace"}, nil)
	descContainerFS  = prometheus.NewDesc("container_fs_usage_bytes", "Bytes used by the container's writable layer", []string{"container", "pod", "namespace"}, nil)
	descScrapeError  = prometheus.NewDesc("scrape_error", "1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
	scrapeTimeout    = 10 * time.Second
)

// Metrics is a prometheus.Collector over a Collector: the figures are
// read when /metrics is scraped.
type Metrics struct{ C *Collector }

var _ prometheus.Collector = Metrics{}

// Describe implements prometheus.Collector.
func (Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descNodeCPU, descNodeMemory, descFSSize, descFSAvail, descPodCPU, descPodMemory,
		descContainerCPU, descContainerMem, descContainerFS, descScrapeError} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m Metrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	s, err := m.C.Collect(ctx)
	failed := 0.0
	if err != nil {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(descScrapeError, prometheus.GaugeValue, failed)
	if !s.Node.Time.IsZero() {
		ch <- prometheus.MustNewConstMetric(descNodeCPU, prometheus.CounterValue, seconds(s.Node.CPUNanos))
		ch <- prometheus.MustNewConstMetric(descNodeMemory, prometheus.GaugeValue, float64(s.Node.MemoryWorkingSet))
		for _, fs := range s.Node.Filesystems {
			ch <- prometheus.MustNewConstMetric(descFSSize, prometheus.GaugeValue, float64(fs.Capacity), fs.Name, fs.Path)
			ch <- prometheus.MustNewConstMetric(descFSAvail, prometheus.GaugeValue, float64(fs.Available), fs.Name, fs.Path)
		}
	}
	type podKey struct{ ns, name string }
	type podSum struct{ cpu, mem uint64 }
	pods := map[podKey]*podSum{}
	var order []podKey
	for _, c := range s.Containers {
		ch <- prometheus.MustNewConstMetric(descContainerCPU, prometheus.CounterValue, seconds(c.CPUNanos), c.Container, c.Pod, c.Namespace)
		ch <- prometheus.MustNewConstMetric(descContainerMem, prometheus.GaugeValue, float64(c.WorkingSet()), c.Container, c.Pod, c.Namespace)
		if c.HasFS {
			ch <- prometheus.MustNewConstMetric(descContainerFS, prometheus.GaugeValue, float64(c.FSUsed), c.Container, c.Pod, c.Namespace)
		}
		k := podKey{c.Namespace, c.Pod}
		p, ok := pods[k]
		if !ok {
			p = &podSum{}
			pods[k] = p
			order = append(order, k)
		}
		p.cpu += c.CPUNanos
		p.mem += c.WorkingSet()
	}
	for _, k := range order {
		ch <- prometheus.MustNewConstMetric(descPodCPU, prometheus.CounterValue, seconds(pods[k].cpu), k.name, k.ns)
		ch <- prometheus.MustNewConstMetric(descPodMemory, prometheus.GaugeValue, float64(pods[k].mem), k.name, k.ns)
	}
}

func seconds(nanos uint64) float64 { return float64(nanos) / float64(time.Second) }
