package runtime

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"flotilla.dev/flotilla/agent/cni"
	"flotilla.dev/flotilla/agent/runtime/logdriver"
	"flotilla.dev/flotilla/agent/runtime/podns"
	"flotilla.dev/flotilla/registry"
	"flotilla.dev/flotilla/test/testimage"
)

var loggerPath string

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "flotilla-runtime-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		loggerPath = filepath.Join(dir, LoggerBinary)
		cmd := exec.Command("go", "build", "-o", loggerPath, "flotilla.dev/flotilla/cmd/flotilla-logger")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build flotilla-logger: %v: %s\n", err, out)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// env is one test's runtime: a private containerd namespace, run and log
// dirs, the test app image pulled, and a private "host" network namespace
// with the CNI bridge in it.
type env struct {
	rt     *Runtime
	image  string
	hostNS string
	net    *cni.Network
	dir    string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	client, ns := testimage.Containerd(t)
	ref := testimage.App(t)
	p, err := registry.NewPuller(client, registry.PullerConfig{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := p.Pull(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e := &env{image: pulled.Image.Name(), dir: dir}
	e.rt, err = New(Config{Client: client, Namespace: ns, RunDir: filepath.Join(dir, "run"), LogDir: filepath.Join(dir, "logs"), LoggerPath: loggerPath})
	if err != nil {
		t.Fatal(err)
	}
	// Containers first, then sandboxes: the order the kubelet uses.
	t.Cleanup(func() {
		ctx := context.Background()
		cs, _ := e.rt.ListContainers(ctx, ListFilter{})
		for _, c := range cs {
			e.rt.RemoveContainer(ctx, c.ID)
		}
		sbs, _ := e.rt.ListSandboxes(ctx)
		for _, sb := range sbs {
			if e.net != nil && sb.NetNS() != "" {
				podns.Do(e.hostNS, func() error { return e.net.Teardown(ctx, sb.ID, sb.NetNS()) })
			}
			if err := e.rt.RemoveSandbox(ctx, sb.ID); err != nil {
				t.Errorf("remove sandbox: %v", err)
			}
		}
	})
	return e
}

// withNetwork adds the private host namespace and a CNI network in it.
func (e *env) withNetwork(t *testing.T, cidr string) {
	t.Helper()
	e.hostNS = filepath.Join(e.dir, "hostns")
	if err := podns.CreateNet(e.hostNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { podns.Remove(e.hostNS) })
	var err error
	e.net, err = cni.New(cni.Config{
		ConfDir: filepath.Join(e.dir, "net.d"), CacheDir: filepath.Join(e.dir, "cni-cache"),
		IPAMDataDir: filepath.Join(e.dir, "ipam"), PodCIDR: cidr, BridgeName: "flt-rt0",
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) sandbox(t *testing.T, name string) *Sandbox {
	t.Helper()
	sb, err := e.rt.CreateSandbox(context.Background(), SandboxConfig{
		Pod:      PodRef{UID: "uid-" + name, Namespace: "default", Name: name},
		Hostname: name,
		DNS:      &DNSConfig{Servers: []string{"10.43.0.10"}, Searches: []string{"default.svc.cluster.local"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func (e *env) podIP(t *testing.T, sb *Sandbox) string {
	t.Helper()
	var ip net.IP
	if err := podns.Do(e.hostNS, func() error {
		var err error
		ip, err = e.net.Setup(context.Background(), sb.ID, sb.NetNS(), cni.Attach{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.SetSandboxIP(context.Background(), sb.ID, ip.String()); err != nil {
		t.Fatal(err)
	}
	return ip.String()
}

func (e *env) run(t *testing.T, sb *Sandbox, name string, mod func(*ContainerConfig)) *Container {
	t.Helper()
	cfg := ContainerConfig{Pod: sb.Pod, Name: name, Image: e.image, Sandbox: sb, Env: []string{"POD_NAME=" + sb.Pod.Name}}
	if mod != nil {
		mod(&cfg)
	}
	c, err := e.rt.CreateContainer(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rt.StartContainer(context.Background(), c.ID); err != nil {
		t.Fatal(err)
	}
	return c
}

// httpGet fetches from inside the private host network namespace.
func (e *env) httpGet(url string) (string, error) {
	tr := &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := podns.Do(e.hostNS, func() error {
				var err error
				c, err = (&net.Dialer{Timeout: time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}
	cl := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: %v", what, err)
}

func waitExited(t *testing.T, rt *Runtime, id string) Status {
	t.Helper()
	var st Status
	eventually(t, "container exits", func() error {
		c, err := rt.ContainerStatus(context.Background(), id)
		if err != nil {
			return err
		}
		st = c.Status
		if st.State != StateExited {
			return fmt.Errorf("state %s", st.State)
		}
		return nil
	})
	return st
}

func logLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		e, err := logdriver.ParseLine(sc.Bytes())
		if err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, e.Stream+": "+string(e.Content))
	}
	return out
}

func containsLine(lines []string, s string) bool {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

func TestRunReachAndStopGracefully(t *testing.T) {
	e := newEnv(t)
	e.withNetwork(t, "10.244.91.0/24")
	ctx := context.Background()
	sb := e.sandbox(t, "web-0")
	ip := e.podIP(t, sb)
	c := e.run(t, sb, "app", func(c *ContainerConfig) { c.Env = append(c.Env, "DRAIN_DELAY=200ms") })

	var body string
	eventually(t, "app answers on the pod IP", func() error {
		var err error
		body, err = e.httpGet("http://" + ip + ":8080/")
		return err
	})
	var info map[string]any
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		t.Fatal(err)
	}
	if info["hostname"] != "web-0" || info["podName"] != "web-0" {
		t.Fatalf("app sees %v", info)
	}
	hosts, err := e.httpGet("http://" + ip + ":8080/file?path=/etc/hosts")
	if err != nil || !strings.Contains(hosts, ip+"\tweb-0") {
		t.Fatalf("/etc/hosts in the container = %q, %v", hosts, err)
	}
	resolv, _ := e.httpGet("http://" + ip + ":8080/file?path=/etc/resolv.conf")
	if !strings.Contains(resolv, "nameserver 10.43.0.10") {
		t.Fatalf("resolv.conf = %q", resolv)
	}

	st, err := e.rt.ContainerStatus(ctx, c.ID)
	if err != nil || st.Status.State != StateRunning || st.Status.Pid == 0 || st.Status.StartedAt.IsZero() {
		t.Fatalf("status = %+v, %v", st, err)
	}
	if st.Pod != sb.Pod || st.Name != "app" || st.Labels[LabelPodUID] != sb.Pod.UID || st.Labels[LabelAttempt] != "0" {
		t.Fatalf("labels = %+v", st)
	}

	final, err := e.rt.StopContainer(ctx, c.ID, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if final.State != StateExited || final.ExitCode != 0 || final.Reason != "Completed" || final.FinishedAt.IsZero() {
		t.Fatalf("after stop = %+v", final)
	}
	lines := logLines(t, c.LogPath)
	for _, want := range []string{"stdout: testapp: listening on [::]:8080", "stdout: testapp: SIGTERM", "stdout: testapp: drained, exiting 0"} {
		if !containsLine(lines, want) {
			t.Errorf("log lacks %q: %q", want, lines)
		}
	}
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	e := newEnv(t)
	sb := e.sandbox(t, "stubborn")
	c := e.run(t, sb, "app", func(c *ContainerConfig) { c.Env = append(c.Env, "IGNORE_SIGTERM=1") })
	eventually(t, "app started", func() error {
		if _, err := os.Stat(c.LogPath); err != nil {
			return err
		}
		if !containsLine(logLines(t, c.LogPath), "listening") {
			return errors.New("not listening yet")
		}
		return nil
	})
	st, err := e.rt.StopContainer(context.Background(), c.ID, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.ExitCode != 137 || st.Reason != "Error" {
		t.Fatalf("status = %+v, want killed (137)", st)
	}
	if !containsLine(logLines(t, c.LogPath), "ignoring SIGTERM") {
		t.Fatal("SIGTERM was not delivered before SIGKILL")
	}
}

func TestOOMKilled(t *testing.T) {
	e := newEnv(t)
	sb := e.sandbox(t, "hungry")
	c := e.run(t, sb, "app", func(c *ContainerConfig) {
		c.MemoryLimit = 20 << 20
		c.Env = append(c.Env, "ALLOC_MIB=64")
	})
	st := waitExited(t, e.rt, c.ID)
	if !st.OOMKilled || st.Reason != "OOMKilled" || st.ExitCode != 137 {
		t.Fatalf("status = %+v, want OOMKilled", st)
	}
}

func TestExec(t *testing.T) {
	e := newEnv(t)
	sb := e.sandbox(t, "exec")
	c := e.run(t, sb, "app", func(c *ContainerConfig) {
		c.User = &User{UID: 1234, GID: 5678}
		c.ReadOnlyRootfs = true
		c.Mounts = []Mount{{Destination: "/scratch", Type: "tmpfs"}}
	})
	ctx := context.Background()
	res, err := e.rt.Exec(ctx, c.ID, []string{"/testapp", "echo", "hi", "there"}, 10*time.Second)
	if err != nil || res.ExitCode != 0 || string(res.Output) != "hi there\n" {
		t.Fatalf("echo = %+v %q, %v", res, res.Output, err)
	}
	if res, err := e.rt.Exec(ctx, c.ID, []string{"/testapp", "exit", "3"}, 10*time.Second); err != nil || res.ExitCode != 3 {
		t.Fatalf("exit 3 = %+v, %v", res, err)
	}
	res, err = e.rt.Exec(ctx, c.ID, []string{"/testapp", "cat", "/proc/self/status"}, 10*time.Second)
	if err != nil || !strings.Contains(string(res.Output), "Uid:\t1234") || !strings.Contains(string(res.Output), "Gid:\t5678") {
		t.Fatalf("status = %q, %v", res.Output, err)
	}
	if res, _ := e.rt.Exec(ctx, c.ID, []string{"/testapp", "append", "/testapp-file", "x"}, 10*time.Second); res.ExitCode == 0 {
		t.Fatal("wrote to a read-only root filesystem")
	}
	if res, err := e.rt.Exec(ctx, c.ID, []string{"/testapp", "append", "/scratch/f", "x"}, 10*time.Second); err != nil || res.ExitCode != 0 {
		t.Fatalf("write to tmpfs volume = %+v %q, %v", res, res.Output, err)
	}
	if _, err := e.rt.Exec(ctx, c.ID, []string{"/testapp", "sleep", "30s"}, 300*time.Millisecond); !errors.Is(err, ErrExecTimeout) {
		t.Fatalf("sleep = %v, want ErrExecTimeout", err)
	}
	if _, err := e.rt.Exec(ctx, c.ID, []string{"/no/such/binary"}, 5*time.Second); err == nil {
		t.Fatal("exec of a missing binary succeeded")
	}
}

func TestCommandMissingInImage(t *testing.T) {
	e := newEnv(t)
	sb := e.sandbox(t, "typo")
	cfg := ContainerConfig{Pod: sb.Pod, Name: "app", Image: e.image, Sandbox: sb, Args: []string{"/bin/nope"}}
	c, err := e.rt.CreateContainer(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = e.rt.StartContainer(context.Background(), c.ID)
	if err == nil || !strings.Contains(err.Error(), "/bin/nope") {
		t.Fatalf("start = %v, want an error naming the command", err)
	}
	st, err := e.rt.ContainerStatus(context.Background(), c.ID)
	if err != nil || st.Status.State != StateCreated {
		t.Fatalf("status after failed start = %+v, %v", st, err)
	}
	if _, err := e.rt.CreateContainer(context.Background(), cfg); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("second create = %v, want ErrAlreadyExists", err)
	}
	cfg.Name, cfg.Image = "other", "127.0.0.1:1/none@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	if _, err := e.rt.CreateContainer(context.Background(), cfg); !errors.Is(err, ErrImageNotPresent) {
		t.Fatalf("create with unpulled image = %v", err)
	}
}

func TestAdoptionAfterRestartAndExitEvents(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.sandbox(t, "survivor")
	running := e.run(t, sb, "app", nil)
	before, err := e.rt.ContainerStatus(ctx, running.ID)
	if err != nil {
		t.Fatal(err)
	}

	// A new Runtime over the same containerd namespace and run dir is what
	// a restarted agent has.
	rt2, err := New(e.rt.cfg)
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan Event, 16)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rt2.Watch(wctx, func(ev Event) { events <- ev })
	}()
	defer func() { cancel(); wg.Wait() }()

	sbs, err := rt2.ListSandboxes(ctx)
	if err != nil || len(sbs) != 1 || sbs[0].Pod != sb.Pod || !sbs[0].Ready() {
		t.Fatalf("sandboxes after restart = %+v, %v", sbs, err)
	}
	again, err := rt2.CreateSandbox(ctx, SandboxConfig{Pod: sb.Pod, Hostname: "survivor"})
	if err != nil || again.CreatedAt != sbs[0].CreatedAt {
		t.Fatalf("CreateSandbox on a ready sandbox must return it: %+v, %v", again, err)
	}
	cs, err := rt2.ListContainers(ctx, ListFilter{PodUID: sb.Pod.UID})
	if err != nil || len(cs) != 1 {
		t.Fatalf("containers after restart = %+v, %v", cs, err)
	}
	if cs[0].ID != running.ID || cs[0].Status.State != StateRunning || cs[0].Status.Pid != before.Status.Pid {
		t.Fatalf("adopted = %+v, want running pid %d", cs[0], before.Status.Pid)
	}

	crasher := e.run(t, sb, "crasher", func(c *ContainerConfig) {
		c.Attempt = 2
		c.Env = append(c.Env, "LISTEN=:8081", "CRASH_AFTER=300ms", "EXIT_CODE=3")
	})
	timeout := time.After(30 * time.Second)
	for got := false; !got; {
		select {
		case ev := <-events:
			got = ev.Type == EventExit && ev.ContainerID == crasher.ID && ev.ExitCode == 3
		case <-timeout:
			t.Fatal("no exit event for the crashed container")
		}
	}
	st, err := rt2.ContainerStatus(ctx, crasher.ID)
	if err != nil || st.Status.State != StateExited || st.Status.ExitCode != 3 || st.Status.Reason != "Error" || st.Attempt != 2 {
		t.Fatalf("crashed = %+v, %v", st, err)
	}
	all, _ := rt2.ListContainers(ctx, ListFilter{})
	if len(all) != 2 || all[0].Name != "app" || all[1].Name != "crasher" {
		t.Fatalf("list = %+v", all)
	}
}

// TestStatusDuringExitsIsNeverUnknown reads containers from several
// goroutines while they exit and the event watcher records the exits. A
// reader must never see a finished container as unknown (a task gone with
// no exit recorded): the kubelet would restart it, running a completed
// init container twice.
func TestStatusDuringExitsIsNeverUnknown(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.sandbox(t, "exits")

	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.rt.Watch(wctx, nil)
	}()
	defer func() { cancel(); wg.Wait() }()

	const rounds, perRound, readers = 3, 6, 4
	for round := 0; round < rounds; round++ {
		var ids []string
		for i := 0; i < perRound; i++ {
			c := e.run(t, sb, fmt.Sprintf("done-%d", i), func(c *ContainerConfig) {
				c.Attempt = uint32(round)
				c.Env = append(c.Env, fmt.Sprintf("LISTEN=:%d", 9100+i), fmt.Sprintf("CRASH_AFTER=%dms", 200+20*i), "EXIT_CODE=0")
			})
			ids = append(ids, c.ID)
		}
		var (
			mu      sync.Mutex
			unknown []string
			rerr    error
		)
		allExited := func(cs []*Container) bool {
			for _, c := range cs {
				if c.Status.State != StateExited {
					return false
				}
			}
			return len(cs) > 0
		}
		note := func(c *Container, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && rerr == nil {
				rerr = err
			}
			if c != nil && c.Status.State == StateUnknown {
				unknown = append(unknown, fmt.Sprintf("%s %+v", c.Name, c.Status))
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		var rg sync.WaitGroup
		for r := 0; r < readers; r++ {
			rg.Add(1)
			go func() {
				defer rg.Done()
				for time.Now().Before(deadline) {
					var seen []*Container
					if r%2 == 0 {
						for _, id := range ids {
							c, err := e.rt.ContainerStatus(ctx, id)
							note(c, err)
							if c != nil {
								seen = append(seen, c)
							}
						}
					} else {
						cs, err := e.rt.ListContainers(ctx, ListFilter{PodUID: sb.Pod.UID})
						note(nil, err)
						for _, c := range cs {
							note(c, nil)
							if c.Attempt == uint32(round) {
								seen = append(seen, c)
							}
						}
					}
					if len(seen) == perRound && allExited(seen) {
						return
					}
				}
			}()
		}
		rg.Wait()
		if rerr != nil {
			t.Fatalf("round %d: read status: %v", round, rerr)
		}
		if len(unknown) > 0 {
			t.Fatalf("round %d: exited containers read as unknown %d times, e.g. %s", round, len(unknown), unknown[0])
		}
		for _, id := range ids {
			c, err := e.rt.ContainerStatus(ctx, id)
			if err != nil || c.Status.State != StateExited || c.Status.ExitCode != 0 || c.Status.Reason != "Completed" || c.Status.FinishedAt.IsZero() {
				t.Fatalf("round %d: %s = %+v, %v; want exited with 0 (Completed)", round, id, c, err)
			}
			if err := e.rt.RemoveContainer(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
}
