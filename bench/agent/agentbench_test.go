package agentbench

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"

	"flotilla.dev/flotilla/agent/runtime"
	"flotilla.dev/flotilla/agent/runtime/podns"
	"flotilla.dev/flotilla/bench/procstat"
	"flotilla.dev/flotilla/internal/testenv"
	"flotilla.dev/flotilla/registry/trust/trusttest"
)

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := summarize(ds)
	if got.N != 100 || got.P50 != 50*time.Millisecond || got.P99 != 99*time.Millisecond || got.Max != 100*time.Millisecond {
		t.Errorf("summarize(1..100 ms) = %+v", got)
	}
	if got := summarize(ds[:2]); got.P50 != 99*time.Millisecond || got.P99 != 100*time.Millisecond {
		t.Errorf("summarize(100, 99 ms) = %+v", got)
	}
	if got := summarize(nil); got != (Latency{}) {
		t.Errorf("summarize(nil) = %+v", got)
	}
}

func TestProcStatus(t *testing.T) {
	st, err := procstat.Status(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st["VmRSS"] <= 0 || st["VmHWM"] < st["VmRSS"] || st["RssAnon"] <= 0 {
		t.Errorf("status of this process: %v", st)
	}
	if err := checkExe(os.Getpid(), "flotilla-agent"); err == nil {
		t.Error("this test binary passed for flotilla-agent")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkExe(os.Getpid(), filepath.Base(self)); err != nil {
		t.Errorf("this test binary as itself: %v", err)
	}
}

// TestRelay joins a connection made inside a network namespace to a
// listener in this one.
func TestRelay(t *testing.T) {
	testenv.RequireRoot(t, "creates a network namespace")
	ns := filepath.Join(t.TempDir(), "netns")
	if err := podns.CreateNet(ns); err != nil {
		t.Fatal(err)
	}
	defer podns.Remove(ns)
	if out, err := exec.Command("nsenter", "--net="+ns, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		b, _ := io.ReadAll(c)
		c.Write([]byte(strings.ToUpper(string(b))))
		c.Close()
	}()
	r, err := startRelay(ns, "127.0.0.1:0", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer r.stop()
	var got []byte
	if err := podns.Do(ns, func() error {
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			return err
		}
		defer c.Close()
		c.Write([]byte("hello hub"))
		c.(*net.TCPConn).CloseWrite()
		got, err = io.ReadAll(c)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if string(got) != "HELLO HUB" {
		t.Errorf("through the relay: %q", got)
	}
}

// TestRunSmall runs the driver at a tiny size, with image trust on as
// `make bench` runs it first, so that `make bench` does not find it
// broken, and checks that it leaves nothing behind; the figures
// themselves are not checked.
func TestRunSmall(t *testing.T) {
	requireDevice(t)
	trusttest.Require(t, "cosign", "scripts/install-deps.sh installs cosign "+trusttest.CosignVersion)
	var log *slog.Logger
	if os.Getenv("FLOTILLA_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	res, err := Run(context.Background(), Options{
		Pods: 2, LoadedPods: 2, Settle: time.Second, Samples: 2, SampleEvery: 100 * time.Millisecond, Log: log, Trust: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range res.Lines() {
		t.Log(l)
	}
	if res.PodStart.N != 2 || res.Bare.N != 2 || res.PodStart.P50 <= 0 || res.Bare.P50 <= 0 || res.Ratio <= 0 {
		t.Errorf("latencies: %+v", res)
	}
	for _, m := range []Memory{res.Idle, res.Loaded} {
		if m.RSS <= 0 || m.Peak < m.RSS || m.HeapInuse <= 0 || m.GoSys <= 0 || m.Goroutines <= 0 {
			t.Errorf("memory: %+v", m)
		}
	}
	if res.Loaded.Pods != 2 || len(res.Lines()) != 4 || !strings.Contains(res.Lines()[2], "trust on") {
		t.Errorf("loaded pods %d, lines %q", res.Loaded.Pods, res.Lines())
	}

	// Nothing left: containerd namespaces, sandboxes.
	client, err := containerd.New(runtime.DefaultSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	nss, err := client.NamespaceService().List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.ID == "" {
		t.Fatal("no run id")
	}
	for _, ns := range nss {
		if strings.HasSuffix(ns, "-"+res.ID) {
			t.Errorf("containerd namespace %s is left", ns)
		}
	}
	if _, err := os.Stat("/run/flotilla/flotilla-bench-agent-" + res.ID); !os.IsNotExist(err) {
		t.Errorf("the agent's run dir is left (%v)", err)
	}
}

// TestFigures prints the full-size figures when FLOTILLA_BENCH_AGENT is
// set (`make bench` runs them through cmd/flotilla-bench instead).
func TestFigures(t *testing.T) {
	if os.Getenv("FLOTILLA_BENCH_AGENT") == "" {
		t.Skip("set FLOTILLA_BENCH_AGENT=1 to print the full-size figures")
	}
	requireDevice(t)
	var env []string
	if e := os.Getenv("FLOTILLA_BENCH_AGENT_ENV"); e != "" {
		env = strings.Fields(e)
	}
	res, err := Run(context.Background(), Options{AgentEnv: env, Log: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	for _, l := range res.Lines() {
		t.Log(l)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func requireDevice(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "the agent benchmark: network namespace, containerd, CNI")
	testenv.RequireContainerd(t)
	testenv.RequireTools(t, "scripts/install-deps.sh installs it", "docker-registry", "nsenter")
}
