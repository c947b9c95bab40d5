// Command flotilla-bench runs the benchmark drivers behind `make bench`
// and prints one line per figure, beside its target. Figures are printed,
// never asserted.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	_ "net/http/pprof" // -pprof-addr: the simulator's profiles
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	agentbench "flotilla.dev/flotilla/bench/agent"
	"flotilla.dev/flotilla/bench/fleetsim"
	gitopsbench "flotilla.dev/flotilla/bench/gitops"
	"flotilla.dev/flotilla/bench/hubapi"
	"flotilla.dev/flotilla/bench/kubebuild"
	proxybench "flotilla.dev/flotilla/bench/proxy"
	"flotilla.dev/flotilla/bench/rollout"
	schedulerbench "flotilla.dev/flotilla/bench/scheduler"
)

func main() {
	only := flag.String("only", "", "comma-separated figures to run (api,apply,exec,fanout,fleet,rollout,gitops,scheduler,proxy,etcd,binary,trust,agent,kubelet,metrics,autonomy; agent includes kubelet); empty runs all")
	kubeletVersion := flag.String("kubelet-version", "", "the upstream kubelet release measured beside the agent (v1.N.P); empty: the one of the client-go in go.mod")
	fleetSizes := flag.String("fleet-sizes", "1000", "comma-separated fleet sizes the fleet figure simulates (1000,5000,10000 for the issue's table)")
	fleetMemLimit := flag.String("fleet-hub-memory-limit", "", "the fleet figure's hub runs with --memory-limit this (1Gi, 0); empty: the hub's default (auto: from its cgroup's limit)")
	pprofAddr := flag.String("pprof-addr", "", "serve this process's /debug/pprof at this address (127.0.0.1:6061): the fleet simulator's CPU and memory")
	flag.StringVar(&hubLog, "hub-log", "", "append the log of every hub the figures start to this file, at level info (by default the hubs log warnings, and nobody keeps them)")
	flag.Parse()
	if *pprofAddr != "" {
		// The fleet simulator runs in this process: what it costs is
		// read here, as the hub's is from the hub's /debug/pprof.
		ln, err := net.Listen("tcp", *pprofAddr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "-pprof-addr %s: %v\n", *pprofAddr, err)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "flotilla-bench: profiles at http://%s/debug/pprof/\n", ln.Addr())
		go http.Serve(ln, nil)
	}
	// The autonomy figure alone keeps a device away from its hub for 10
	// minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Minute)
	defer cancel()
	want := func(name string) bool {
		return *only == "" || strings.Contains(","+*only+",", ","+name+",")
	}
	failed := false
	report := func(name string, err error) {
		if err != nil {
			fmt.Printf("%-44s ERROR %v\n", name, err)
			failed = true
		}
	}
	if want("api") || want("apply") || want("fanout") || want("rollout") || want("gitops") {
		hub, err := startHub(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "starting the hub:", err)
			os.Exit(1)
		}
		defer hub.stop()
		if want("api") {
			for _, c := range []struct{ clients, n int }{{1, 1000}, {16, 8000}} {
				ns, err := hub.namespace(ctx, fmt.Sprintf("bench-create-%d", c.clients))
				if err != nil {
					report("hub creates", err)
					continue
				}
				r, err := hubapi.Creates(ctx, hub.cfg, ns, c.clients, c.n)
				report(fmt.Sprintf("hub creates, %d client(s)", c.clients), err)
				if err == nil {
					fmt.Printf("%-44s %8.0f creates/s  p50 %v  p99 %v  (target ≥ 2,000/s with 16 clients)\n",
						fmt.Sprintf("hub creates, %d client(s)", c.clients), r.PerSec, r.P50.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond))
				}
			}
		}
		if want("apply") {
			ns, err := hub.namespace(ctx, "bench-apply")
			if err == nil {
				var r hubapi.ApplyResult
				r, err = hubapi.ApplyVsUpdate(ctx, hub.cfg, ns, 1000)
				if err == nil {
					fmt.Printf("%-44s p50 %v  p99 %v  vs update p50 %v  p99 %v  (%d writes each, managedFields %d B)\n",
						"server-side apply of a Deployment", r.ApplyP50.Round(10*time.Microsecond), r.ApplyP99.Round(10*time.Microsecond),
						r.UpdateP50.Round(10*time.Microsecond), r.UpdateP99.Round(10*time.Microsecond), r.Writes, r.ManagedFieldsBytes)
				}
			}
			report("server-side apply of a Deployment", err)
		}
		if want("rollout") {
			d, err := rollout.Run(ctx, hub.cfg, 100)
			report("rolling update, 100 replicas", err)
			if err == nil {
				fmt.Printf("%-44s %v to complete (simulated devices running the agent's kubelet, %d pods each, containers start in %v)\n",
					"rolling update, 100 replicas", d.Round(10*time.Millisecond), rollout.PodsPerDevice, rollout.ReadyDelay)
			}
			r, err := rollout.Staged(ctx, hub.cfg, 1000)
			report("staged rollout, 1000 devices", err)
			if err == nil {
				for _, l := range r.Lines() {
					fmt.Println(l)
				}
			}
			r, err = rollout.StagedDeployment(ctx, hub.cfg, 1000)
			report("staged Deployment, 1000 replicas", err)
			if err == nil {
				for _, l := range r.Lines() {
					fmt.Println(l)
				}
			}
		}
		if want("gitops") {
			r, err := gitopsbench.Run(ctx, hub.cfg, gitopsbench.Options{})
			report("gitops", err)
			if err == nil {
				for _, l := range r.Lines() {
					fmt.Println(l)
				}
			}
		}
		if want("fanout") {
			for _, n := range []int{1000, 10000} {
				ns, err := hub.namespace(ctx, fmt.Sprintf("bench-fanout-%d", n))
				if err != nil {
					report("watch fan-out", err)
					continue
				}
				r, err := hubapi.Fanout(ctx, hub.cfg, ns, n, hub.cmd.Process.Pid)
				name := fmt.Sprintf("watch fan-out, %d watchers", n)
				report(name, err)
				if err == nil {
					fmt.Printf("%-44s p50 %v  p99 %v  all %v  hub RSS %d MB  (target p99 ≤ 1 s, RSS ≤ 1 GB at 10,000)\n",
						name, r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond), r.All.Round(time.Millisecond), r.HubRSS>>20)
				}
			}
		}
	}
	if want("exec") {
		line, err := execRoundTrip(ctx)
		report("exec round trip", err)
		if err == nil {
			fmt.Println(line)
		}
	}
	if want("fleet") {
		for _, f := range strings.Split(*fleetSizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				report("fleet", fmt.Errorf("-fleet-sizes: %q is not a number of devices", f))
				continue
			}
			lines, err := fleetFigures(ctx, n, *fleetMemLimit)
			report(fmt.Sprintf("fleet of %d devices", n), err)
			for _, l := range lines {
				fmt.Println(l)
			}
		}
	}
	if want("scheduler") {
		for _, nodes := range []int{1000, 5000} {
			name := fmt.Sprintf("scheduler, %d nodes, 10,000 pods", nodes)
			algo, err := schedulerbench.RunAlgorithm(ctx, nodes, 10000)
			report(name+" (algorithm)", err)
			e2e, err2 := schedulerbench.Run(ctx, nodes, 10000)
			report(name+" (with binding)", err2)
			if err == nil && err2 == nil {
				fmt.Printf("%-44s %8.0f pods/s end to end, %.0f pods/s placement alone  (target ≥ 1,000 pods/s at 5,000)\n", name, e2e, algo)
			}
		}
		// What a user waits for: create through the hub's HTTPS API to
		// the binding a watcher sees, with every controller running.
		const apiNodes, apiPods = 5000, 5000
		name := fmt.Sprintf("scheduler via API, %d nodes, %d pods", apiNodes, apiPods)
		hub, err := startHub(ctx)
		report(name, err)
		if err == nil {
			r, err := schedulerbench.RunAPI(ctx, hub.cfg, "sched-bench", apiNodes, apiPods)
			report(name, err)
			if err == nil {
				fmt.Printf("%-44s %8.0f pods/s create → bound seen by a watcher (%.1f s; creates answered after %.1f s; anti-affinity and spread in 2/3)  (target ≥ 5,000 pods/s)\n",
					name, r.PerSec, r.Elapsed.Seconds(), r.CreatesDone.Seconds())
			}
			hub.stop()
		}
	}
	if want("proxy") {
		r, err := proxybench.Run(ctx, proxybench.Options{})
		report("service proxy", err)
		if err == nil {
			for _, l := range r.Lines() {
				fmt.Println(l)
			}
		}
	}
	if want("etcd") {
		lines, err := etcdFigures(ctx)
		report("hubs on etcd", err)
		for _, l := range lines {
			fmt.Println(l)
		}
	}
	if want("binary") {
		lines, err := binary(ctx)
		report("agent binary", err)
		for _, l := range lines {
			fmt.Println(l)
		}
	}
	if want("trust") {
		lines, err := trustFigures(ctx)
		report("image trust", err)
		for _, l := range lines {
			fmt.Println(l)
		}
	}
	// The upstream kubelet's figures are printed beside the agent's with
	// trust on (the targets' figure) from the same run.
	var agentFigures agentbench.Results
	if want("agent") {
		// With image trust on (the figure the targets are for), then off:
		// what verification costs the agent.
		for _, trust := range []bool{true, false} {
			r, err := agentbench.Run(ctx, agentbench.Options{Trust: trust})
			report(fmt.Sprintf("agent (trust %v)", trust), err)
			if err == nil {
				for _, l := range r.Lines() {
					fmt.Println(l)
				}
				if trust {
					agentFigures = r
				}
			}
		}
	}
	if want("agent") || want("kubelet") {
		lines, err := upstreamKubelet(ctx, *kubeletVersion, agentFigures)
		report("upstream kubelet", err)
		for _, l := range lines {
			fmt.Println(l)
		}
	}
	if want("metrics") {
		// What the usage figures cost the agent: the same device with
		// metrics on and off, over a 30 s window in which an agent with
		// them on sends two reports (a 15 s interval, a quarter of the
		// default) and is scraped once.
		for _, env := range [][]string{{"FLOTILLA_METRICS=true", "FLOTILLA_USAGE_INTERVAL=15s"}, {"FLOTILLA_METRICS=false"}} {
			r, err := agentbench.Run(ctx, agentbench.Options{SkipStart: true, Samples: 31, SampleEvery: time.Second, AgentEnv: env})
			report(fmt.Sprintf("agent metrics %v", env), err)
			if err == nil {
				for _, l := range r.Lines() {
					fmt.Println(l)
				}
			}
		}
	}
	if want("autonomy") {
		lines, err := autonomy(ctx)
		report("autonomy", err)
		for _, l := range lines {
			fmt.Println(l)
		}
	}
	if failed {
		os.Exit(1)
	}
}

// upstreamKubelet builds the upstream kubelet of version (by default the
// release of the client-go in go.mod) through the Go module proxy, cached
// across runs, and measures it standalone beside the agent's figures.
// What this machine cannot give it (the module proxy, root, containerd's
// CRI plugin) makes a "not measured" line that says why, not an error.
func upstreamKubelet(ctx context.Context, version string, agent agentbench.Results) ([]string, error) {
	if version == "" {
		out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", "k8s.io/client-go").Output()
		if err != nil {
			return []string{fmt.Sprintf("%-44s not measured: the client-go version is unknown (%v); name a release with -kubelet-version", "upstream kubelet", err)}, nil
		}
		version = "v1." + strings.TrimPrefix(strings.TrimSpace(string(out)), "v0.")
	}
	name := "upstream kubelet " + version
	notMeasured := func(err error) []string {
		return []string{fmt.Sprintf("%-44s not measured: %v", name, err)}
	}
	fmt.Fprintf(os.Stderr, "building %s through the Go module proxy unless cached (several minutes the first time)\n", name)
	bin, err := kubebuild.Kubelet(ctx, kubebuild.Options{Version: version})
	if err != nil {
		return notMeasured(err), nil
	}
	r, err := agentbench.RunKubelet(ctx, agentbench.KubeletOptions{Binary: bin, Version: version})
	if errors.Is(err, agentbench.ErrNoCRI) || errors.Is(err, agentbench.ErrNotRoot) {
		return notMeasured(err), nil
	}
	if err != nil {
		return nil, err
	}
	return r.Lines(agent), nil
}

// execRoundTrip runs test/e2e's BenchmarkExecRoundTrip (root, containerd,
// the demo's fleet of one device) once: sequential execs through the hub
// into a container on the device, each a WebSocket session as kubectl's.
func execRoundTrip(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-run", "^$", "-bench", "^BenchmarkExecRoundTrip$", "-benchtime", "1x", "./test/e2e/")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%v\n%s", err, out)
	}
	metrics := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(l, "BenchmarkExecRoundTrip") {
			continue
		}
		f := strings.Fields(l)
		for i := 1; i+1 < len(f); i++ {
			metrics[f[i+1]] = f[i]
		}
	}
	if metrics["p50-ms"] == "" || metrics["p99-ms"] == "" {
		return "", fmt.Errorf("no figures in:\n%s", out)
	}
	execs, _ := strconv.ParseFloat(metrics["execs"], 64)
	return fmt.Sprintf("%-44s p50 %s ms  p99 %s ms  (%.0f sequential execs of `/testapp exit 0` through the hub to a real device, each its own WebSocket session)",
		"exec round trip", metrics["p50-ms"], metrics["p99-ms"], execs), nil
}

// autonomyFigures names agent/agent's BenchmarkAutonomy metrics.
var autonomyFigures = []struct{ metric, name, unit string }{
	{"ms-start-to-cached-pods-ready", "agent start, hub away → 5 cached pods Ready", "ms"},
	{"ms-reboot-to-service-answering", "power cut, hub away → Service answering", "ms"},
	{"min-away", "device away from the hub (hub down)", "min"},
	{"reconnect-requests", "reconnect: requests the device sends", "requests"},
	{"reconnect-sent-KiB", "reconnect: bytes the device sends (bodies)", "KiB"},
	{"reconnect-read-KiB", "reconnect: bytes the device reads (bodies)", "KiB"},
}

// autonomy runs BenchmarkAutonomy (root, containerd, a real agent on its
// own namespace) once and prints its metrics as figures. The device is
// away from its hub for 10 minutes (FLOTILLA_AWAY, passed through, says
// otherwise), past go test's default timeout.
func autonomy(ctx context.Context) ([]string, error) {
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-timeout", "40m", "-run", "^$", "-bench", "^BenchmarkAutonomy$", "-benchtime", "1x", "./agent/agent/")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%v\n%s", err, out)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(l, "BenchmarkAutonomy") {
			continue
		}
		f := strings.Fields(l)
		for _, fig := range autonomyFigures {
			for i := 1; i+1 < len(f); i++ {
				if f[i+1] == fig.metric {
					lines = append(lines, fmt.Sprintf("%-44s %s %s", fig.name, f[i], fig.unit))
				}
			}
		}
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("no figures in:\n%s", out)
	}
	return lines, nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// hubLog is where the hubs' logs go (-hub-log); empty: nowhere.
var hubLog string

type hubProc struct {
	cmd  *exec.Cmd
	bin  string
	args []string
	dir  string
	cfg  *rest.Config
	cs   kubernetes.Interface
}

func (h *hubProc) stop() {
	h.kill()
	_ = os.RemoveAll(h.dir)
}

// kill ends the hub process, leaving its data dir.
func (h *hubProc) kill() {
	_ = h.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = h.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = h.cmd.Process.Kill()
		<-done
	}
}

func (h *hubProc) namespace(ctx context.Context, name string) (string, error) {
	_, err := h.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return name, err
}

// startHub runs the flotilla-hub binary (from $FLOTILLA_BIN, as make bench
// builds it) on loopback with a temporary data dir.
func startHub(ctx context.Context) (*hubProc, error) {
	return startHubWith(ctx, "")
}

// startHubWith starts a hub with extra serve flags; pkiFrom, when set, is
// a data dir whose pki/ the new hub gets (a second hub of a fleet).
func startHubWith(ctx context.Context, pkiFrom string, args ...string) (*hubProc, error) {
	bin := filepath.Join(os.Getenv("FLOTILLA_BIN"), "flotilla-hub")
	if os.Getenv("FLOTILLA_BIN") == "" {
		bin = "flotilla-hub"
	}
	dir, err := os.MkdirTemp("", "flotilla-bench-hub-")
	if err != nil {
		return nil, err
	}
	if pkiFrom != "" {
		if err := os.CopyFS(filepath.Join(dir, "pki"), os.DirFS(filepath.Join(pkiFrom, "pki"))); err != nil {
			return nil, err
		}
	}
	h := &hubProc{bin: bin, args: args, dir: dir}
	if err := h.launch(ctx, "127.0.0.1:0"); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return h, nil
}

// launch starts the hub process on listen and waits until it answers.
func (h *hubProc) launch(ctx context.Context, listen string) error {
	level := "warn"
	var logTo io.WriteCloser = nopCloser{io.Discard}
	if hubLog != "" {
		f, err := os.OpenFile(hubLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("the hub's log (-hub-log): %w", err)
		}
		level, logTo = "info", f
	}
	cmd := exec.CommandContext(ctx, h.bin, append([]string{"serve", "--data-dir", h.dir, "--listen", listen, "--config=", "--log-level", level}, h.args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logTo.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logTo.Close()
		return fmt.Errorf("running %s: %w (run `make bench`, which builds it)", h.bin, err)
	}
	h.cmd = cmd
	ready := make(chan struct{})
	go func() {
		defer logTo.Close()
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			fmt.Fprintln(logTo, sc.Text())
			if !signalled && strings.Contains(sc.Text(), "admin kubeconfig:") {
				close(ready)
				signalled = true
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("the hub did not start within 30s")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(h.dir, "admin.kubeconfig"))
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = -1, 0
	// A dialer of its own keeps client-go from handing this client the
	// transport it cached for the same kubeconfig, which after a restart
	// still holds the killed process's connection.
	cfg.Dial = (&net.Dialer{Timeout: 10 * time.Second}).DialContext
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	h.cfg, h.cs = cfg, cs
	// A restarted hub answers its admin among the fleet's reconnections
	// (TLS handshakes first): it is given longer than a new one. Each try
	// on a connection of its own, given 10 s, as kubectl's would be: a
	// connection whose handshake the busy hub gave up on is not tried
	// again.
	within := 30 * time.Second
	if listen != "127.0.0.1:0" {
		within = 3 * time.Minute
	}
	for deadline := time.Now().Add(within); ; {
		try := rest.CopyConfig(cfg)
		try.Timeout = 10 * time.Second
		hc, err := rest.HTTPClientFor(try)
		if err != nil {
			return err
		}
		tcs, err := kubernetes.NewForConfigAndClient(try, hc)
		if err == nil {
			_, err = tcs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		}
		hc.CloseIdleConnections()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			h.kill()
			return fmt.Errorf("the hub does not answer: %w", err)
		}
		// A new connection a try: at most one a quarter second.
		time.Sleep(250 * time.Millisecond)
	}
}

// restart stops the hub and starts it again on its data dir and address,
// as a hub upgrade does; it returns the new process's PID.
func (h *hubProc) restart(ctx context.Context) (int, error) {
	listen := strings.TrimPrefix(h.cfg.Host, "https://")
	h.kill()
	if err := h.launch(ctx, listen); err != nil {
		return 0, err
	}
	return h.cmd.Process.Pid, nil
}

// raiseFileLimit raises this process's limit on open files (which the
// hubs it starts inherit) to at least want, and returns the limit.
func raiseFileLimit(want int) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur >= uint64(want) {
		return lim.Cur, nil
	}
	next := lim
	next.Cur = uint64(want)
	next.Max = max(lim.Max, next.Cur)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next); err != nil {
		return lim.Cur, fmt.Errorf("raising it to %d: %w", want, err)
	}
	return next.Cur, nil
}

// fleetFigures runs bench/fleetsim's devices against a hub of their own,
// with --memory-limit memLimit unless it is empty. A limit trades the
// hub's CPU for its memory, so the figures say when there is one.
func fleetFigures(ctx context.Context, devices int, memLimit string) ([]string, error) {
	var args, lines []string
	name := fmt.Sprintf("fleet of %d devices", devices)
	if memLimit != "" {
		args = []string{"--memory-limit", memLimit}
		lines = append(lines, fmt.Sprintf("%-44s hub run with --memory-limit %s (-fleet-hub-memory-limit)", name, memLimit))
	}
	// Every simulated device holds a connection in this one process, and
	// the hub one for each; while they all reconnect at once, both need
	// more than the 20,000 descriptors a shell often allows. The hub's
	// package gives it 65,536 (flotilla-hub.service).
	if n, err := raiseFileLimit(4*devices + 1024); err != nil {
		lines = append(lines, fmt.Sprintf("%-44s open files limited to %d (%v): the restart storm may run out", name, n, err))
	}
	hub, err := startHubWith(ctx, "", args...)
	if err != nil {
		return nil, err
	}
	defer hub.stop()
	dir, err := os.MkdirTemp("", "flotilla-bench-fleet-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	r, err := fleetsim.Run(ctx, hub.cfg, fleetsim.Hub{PID: hub.cmd.Process.Pid, Restart: hub.restart}, devices, dir)
	if err != nil {
		return nil, err
	}
	return append(lines, r.Lines()...), nil
}
