package agentbench

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/agent/runtime/podns"
	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/bench/procstat"
)

// Memory is the agent process's memory at one point.
type Memory struct {
	// RSS is the median VmRSS over the samples; Peak is VmHWM at the end.
	RSS, Peak int64
	// Anon and File split the last sample's RSS: the heap, stacks and
	// runtime structures, and the binary's pages mapped from disk.
	Anon, File int64
	// WorkingSet is what the agent touched during the sampling window
	// (the pages whose referenced bit got set again after it was
	// cleared), split the same way: resident pages outside it were
	// touched once (at start, mostly) and are clean file pages the kernel
	// drops first under memory pressure, or idle heap.
	WorkingSetAnon, WorkingSetFile int64
	// The Go runtime's view, from the agent's /metrics at the end:
	// HeapInuse (live objects and fragmentation), HeapIdle minus
	// HeapReleased (freed heap the runtime keeps), StackInuse, and Sys
	// (everything the runtime obtained from the OS).
	HeapInuse, HeapRetained, StackInuse, GoSys int64
	Goroutines                                 int
	Pods                                       int
	// CPU is the agent's user and system time over the sampling window,
	// in cores.
	CPU float64
}

// referenced sums the Referenced lines of /proc/PID/smaps, for mappings
// of a file and the others.
func referenced(pid int) (anon, file int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	fileBacked := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		switch {
		case len(fs) >= 5 && strings.Contains(fs[0], "-") && !strings.HasSuffix(fs[0], ":"):
			// A mapping's header: range perms offset dev inode [path].
			fileBacked = len(fs) >= 6 && strings.HasPrefix(fs[5], "/")
		case len(fs) == 3 && fs[0] == "Referenced:":
			n, _ := strconv.ParseInt(fs[1], 10, 64)
			if fileBacked {
				file += n << 10
			} else {
				anon += n << 10
			}
		}
	}
	return anon, file, sc.Err()
}

// checkExe makes sure pid runs the binary named name itself (nsenter
// execs the agent in place), not a wrapper or a shim.
func checkExe(pid int, name string) error {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return err
	}
	if !strings.HasSuffix(exe, "/"+name) {
		return fmt.Errorf("process %d is %s, not %s", pid, exe, name)
	}
	return nil
}

// measureMemory samples the agent's VmRSS every interval, n times, then
// reads its Go metrics.
func (b *bench) measureMemory(ctx context.Context, n int, interval time.Duration, pods int) (Memory, error) {
	pid := b.agent.pid()
	if err := checkExe(pid, "flotilla-agent"); err != nil {
		return Memory{}, err
	}
	m, err := sampleMemory(ctx, pid, n, interval)
	if err != nil {
		return m, fmt.Errorf("the agent's memory: %w", err)
	}
	m.Pods = pods
	metrics, err := b.agentMetrics(ctx)
	if err != nil {
		return m, fmt.Errorf("the agent's /metrics: %w", err)
	}
	m.HeapInuse = int64(metrics["go_memstats_heap_inuse_bytes"])
	m.HeapRetained = int64(metrics["go_memstats_heap_idle_bytes"] - metrics["go_memstats_heap_released_bytes"])
	m.StackInuse = int64(metrics["go_memstats_stack_inuse_bytes"])
	m.GoSys = int64(metrics["go_memstats_sys_bytes"])
	m.Goroutines = int(metrics["go_goroutines"])
	return m, nil
}

// sampleMemory samples a process's VmRSS every interval, n times, and
// says what it touched and how much CPU it used meanwhile: what the
// agent's and the upstream kubelet's figures share.
func sampleMemory(ctx context.Context, pid, n int, interval time.Duration) (Memory, error) {
	// Clearing the referenced bits changes nothing resident; smaps tells
	// afterwards which pages were used again.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("1"), 0); err != nil {
		return Memory{}, fmt.Errorf("clearing the referenced bits: %w", err)
	}
	var (
		rss  []int64
		last map[string]int64
		err  error
	)
	start := time.Now()
	ticks0, err := procstat.CPUTicks(pid)
	if err != nil {
		return Memory{}, fmt.Errorf("reading the CPU time: %w", err)
	}
	for i := 0; i < n; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return Memory{}, ctx.Err()
			case <-time.After(interval):
			}
		}
		if last, err = procstat.Status(pid); err != nil {
			return Memory{}, fmt.Errorf("reading the memory: %w", err)
		}
		rss = append(rss, last["VmRSS"])
	}
	ticks1, err := procstat.CPUTicks(pid)
	if err != nil {
		return Memory{}, fmt.Errorf("reading the CPU time: %w", err)
	}
	cpu := float64(ticks1-ticks0) / 100 / time.Since(start).Seconds()
	sort.Slice(rss, func(i, j int) bool { return rss[i] < rss[j] })
	m := Memory{CPU: cpu, RSS: rss[len(rss)/2], Peak: last["VmHWM"], Anon: last["RssAnon"], File: last["RssFile"] + last["RssShmem"]}
	if m.WorkingSetAnon, m.WorkingSetFile, err = referenced(pid); err != nil {
		return m, fmt.Errorf("reading the working set: %w", err)
	}
	return m, nil
}

// agentMetrics reads the agent server's /metrics as the hub would: with
// the hub's admin certificate, checking the agent's certificate against
// the pin its Node publishes, over the device's loopback.
func (b *bench) agentMetrics(ctx context.Context) (map[string]float64, error) {
	node, err := b.client.CoreV1().Nodes().Get(ctx, b.node, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
	pin := node.Annotations[agentapi.AnnotationServingCertHash]
	if port == 0 || pin == "" {
		return nil, fmt.Errorf("node %s publishes no agent server port or certificate pin", b.node)
	}
	certPEM, keyPEM := b.hub.PKI().AdminCredentials()
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		TLSClientConfig: agentapi.PinnedTLSConfig(pin, &cert),
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := podns.Do(b.netns, func() error {
				var err error
				c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.Contains(line, "{") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.Fields(val)[0], 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// usageWritten reads the hub's counters of stored usage reports.
func (b *bench) usageWritten(ctx context.Context) (reports, bytes int64, err error) {
	raw, err := b.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("the hub's /metrics: %w", err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
		switch k {
		case "flotilla_apiserver_usage_reports_total":
			reports = int64(n)
		case "flotilla_apiserver_usage_report_bytes_total":
			bytes = int64(n)
		}
	}
	return reports, bytes, nil
}
