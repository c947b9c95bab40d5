package agentbench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"flotilla.dev/flotilla/agent/cni"
	"flotilla.dev/flotilla/agent/runtime"
	"flotilla.dev/flotilla/agent/runtime/podns"
	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/pki"
	"flotilla.dev/flotilla/internal/buildtags"
	"flotilla.dev/flotilla/registry"
	"flotilla.dev/flotilla/registry/trust/trusttest"
	"flotilla.dev/flotilla/test/testimage"
)

// podCIDR is the device's pod range; it lives in the device's own network
// namespace, so it cannot meet the host's.
const podCIDR = "10.42.250.0/24"

// bench is one run's world: hub, registry, image, device and agent. Its
// close undoes everything, in reverse order, whatever got set up.
type bench struct {
	o      Options
	log    *slog.Logger
	id     string
	dir    string
	undo   []func()
	client kubernetes.Interface
	hub    *hub.Hub
	ctrd   *containerd.Client
	image  string
	// The device.
	node    string
	netns   string
	agentNS string
	agent   *process
	runDir  string
	logger  string
	// registry is the test registry's host:port.
	registry string
	// trustDir is the agent's --trust-dir: empty, or the key that signed
	// the image.
	trustDir string
}

func (b *bench) onClose(f func()) { b.undo = append(b.undo, f) }

func (b *bench) close() {
	for i := len(b.undo) - 1; i >= 0; i-- {
		b.undo[i]()
	}
	b.undo = nil
}

func newBench(ctx context.Context, o Options) (_ *bench, err error) {
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	b := &bench{o: o, log: o.Log, id: hex.EncodeToString(rnd[:])}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	b.dir, err = os.MkdirTemp("", "flotilla-bench-agent-")
	if err != nil {
		return nil, err
	}
	b.onClose(func() { os.RemoveAll(b.dir) })

	bin, err := agentBinaries(ctx, o.BinDir, b.dir)
	if err != nil {
		return nil, err
	}
	if err := b.startHub(ctx); err != nil {
		return nil, err
	}
	b.ctrd, err = containerd.New(runtime.DefaultSocket, containerd.WithTimeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("containerd at %s: %w", runtime.DefaultSocket, err)
	}
	b.onClose(func() { b.ctrd.Close() })
	reg, err := startRegistry(b.dir)
	if err != nil {
		return nil, err
	}
	b.onClose(reg.stop)
	b.log.Info("building the test image")
	img, err := testimage.BuildImage(&testimage.Registry{Host: reg.host}, "testapp", testimage.AppPackage, testimage.Options{ExposedPorts: []string{"8080/tcp"}})
	if err != nil {
		return nil, fmt.Errorf("the test image: %w", err)
	}
	b.image, b.registry = img.Ref, reg.host
	b.trustDir = filepath.Join(b.dir, "trust")
	if err := os.MkdirAll(b.trustDir, 0o755); err != nil {
		return nil, err
	}
	if o.Trust {
		if err := b.sign(); err != nil {
			return nil, err
		}
	}
	b.agentNS = "flotilla-bench-agent-" + b.id
	if err := b.namespace(ctx, b.agentNS); err != nil {
		return nil, err
	}
	b.logger = filepath.Join(filepath.Dir(bin), runtime.LoggerBinary)
	if err := b.startDevice(ctx, bin); err != nil {
		return nil, err
	}
	return b, nil
}

// sign signs the test image with a fresh key and puts the public key in
// the agent's trust dir.
func (b *bench) sign() error {
	bin, err := exec.LookPath("cosign")
	if err != nil {
		return fmt.Errorf("cosign is not installed (scripts/install-deps.sh installs %s): %w", trusttest.CosignVersion, err)
	}
	cli, err := trusttest.NewCLI(bin, filepath.Join(b.dir, "cosign"))
	if err != nil {
		return err
	}
	pub, err := cli.TryGenerateKeyPair("bench")
	if err != nil {
		return err
	}
	if err := cli.TrySign("bench", b.image, trusttest.Legacy); err != nil {
		return err
	}
	key, err := os.ReadFile(pub)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(b.trustDir, "bench.pub"), key, 0o644)
}

// startHub runs a hub in this process on the host's loopback.
func (b *bench) startHub(ctx context.Context) error {
	dir := filepath.Join(b.dir, "hub")
	h, err := hub.New(hub.Config{DataDir: dir, Listen: "127.0.0.1:0", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return fmt.Errorf("starting a hub: %w", err)
	}
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- h.Run(hctx) }()
	b.onClose(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			b.log.Warn("the hub did not stop within 30s")
		}
	})
	b.hub = h
	b.client, err = kubernetes.NewForConfig(h.AdminConfig())
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := b.client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the hub did not become ready: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// namespace creates a containerd namespace, removed with all it holds at
// close, and pulls the test image into it.
func (b *bench) namespace(ctx context.Context, ns string) error {
	nctx := namespaces.WithNamespace(ctx, ns)
	if err := b.ctrd.NamespaceService().Create(nctx, ns, map[string]string{"flotilla.dev/bench": "true"}); err != nil {
		return fmt.Errorf("create containerd namespace %s: %w", ns, err)
	}
	b.onClose(func() {
		if err := testimage.DeleteNamespace(context.Background(), b.ctrd, ns); err != nil {
			b.log.Warn("cleaning up a containerd namespace", "namespace", ns, "err", err)
		}
	})
	p, err := registry.NewPuller(b.ctrd, registry.PullerConfig{Namespace: ns})
	if err != nil {
		return err
	}
	if _, err := p.Pull(ctx, b.image); err != nil {
		return fmt.Errorf("pull %s into %s: %w", b.image, ns, err)
	}
	return nil
}

// startDevice makes the device's network namespace, the relay to the hub
// and the node's credentials, and starts the agent.
func (b *bench) startDevice(ctx context.Context, bin string) error {
	b.node = "bench-dev-" + b.id
	b.netns = filepath.Join(b.dir, "netns")
	if err := podns.CreateNet(b.netns); err != nil {
		return fmt.Errorf("the device's network namespace: %w", err)
	}
	b.onClose(func() {
		if err := podns.Remove(b.netns); err != nil {
			b.log.Warn("removing the device's network namespace", "err", err)
		}
	})
	if out, err := exec.CommandContext(ctx, "nsenter", "--net="+b.netns, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("loopback up in the device's namespace: %v: %s", err, out)
	}
	relay, err := startRelay(b.netns, "127.0.0.1:0", b.hub.Addr().String())
	if err != nil {
		return err
	}
	b.onClose(relay.stop)
	// The registry answers on the device's loopback at the address the
	// image names, for verifying signatures (and pulling).
	regRelay, err := startRelay(b.netns, b.registry, b.registry)
	if err != nil {
		return err
	}
	b.onClose(regRelay.stop)

	cert, key, err := b.hub.PKI().IssueClientCert("system:node:"+b.node, []string{"system:nodes"}, 24*time.Hour)
	if err != nil {
		return fmt.Errorf("the device's client certificate: %w", err)
	}
	kubeconfig := filepath.Join(b.dir, "node.kubeconfig")
	if err := pki.WriteKubeconfig(kubeconfig, "https://"+relay.addr, b.hub.PKI().CACertPEM(), cert, key, "system:node:"+b.node); err != nil {
		return err
	}
	// The agent writes its default network unless the conf dir has one:
	// this one keeps host-local's leases in the bench's directory.
	confDir := filepath.Join(b.dir, "net.d")
	conf, err := cni.DefaultConfList(cni.Config{PodCIDR: podCIDR, IPAMDataDir: filepath.Join(b.dir, "ipam")})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(confDir, cni.DefaultConfFile), conf, 0o644); err != nil {
		return err
	}
	// The runtime keeps sandboxes in /run/flotilla/<containerd namespace>.
	b.runDir = filepath.Join("/run/flotilla", b.agentNS)
	b.onClose(b.removeLeftovers)

	args := []string{
		"--net=" + b.netns, "--", bin, "run", "--config=",
		"--kubeconfig", kubeconfig, "--node-name", b.node, "--node-ip", "127.0.0.1",
		"--data-dir", filepath.Join(b.dir, "agent"), "--containerd-namespace", b.agentNS,
		"--server-listen", "127.0.0.1:0", "--cni-conf-dir", confDir, "--log-dir", filepath.Join(b.dir, "logs"),
		"--labels", "node.flotilla.dev/bench=" + b.id, "--log-level", "warn", "--trust-dir", b.trustDir,
	}
	b.agent, err = startProcess("nsenter", args, b.o.AgentEnv, filepath.Join(b.dir, "agent.log"))
	if err != nil {
		return fmt.Errorf("starting flotilla-agent: %w", err)
	}
	b.onClose(b.stopAgent)
	if err := b.waitNodeReady(ctx); err != nil {
		return err
	}
	return nil
}

// waitNodeReady waits for the Node, gives it its pod CIDR (the hub's node
// controller's job, not run here) and waits for Ready.
func (b *bench) waitNodeReady(ctx context.Context) error {
	nodes := b.client.CoreV1().Nodes()
	assigned := false
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := b.agent.exited(); err != nil {
			return fmt.Errorf("flotilla-agent exited: %w\n%s", err, b.agent.tail())
		}
		n, err := nodes.Get(ctx, b.node, metav1.GetOptions{})
		if err == nil && !assigned {
			n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDR, []string{podCIDR}
			if _, err := nodes.Update(ctx, n, metav1.UpdateOptions{}); err == nil {
				assigned = true
			}
		}
		if err == nil && assigned {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return nil
				}
			}
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading node %s: %w", b.node, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s not Ready within 60s\n%s", b.node, b.agent.tail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (b *bench) stopAgent() {
	if err := b.agent.stop(30 * time.Second); err != nil {
		b.log.Warn("stopping flotilla-agent", "err", err)
	}
}

// removeLeftovers removes what a stopped agent may leave of its pods:
// containers, pod networks and sandboxes (bind-mounted namespaces in the
// run dir). After a clean run there is nothing to remove.
func (b *bench) removeLeftovers() {
	ctx := context.Background()
	rt, err := runtime.New(runtime.Config{
		Client: b.ctrd, Namespace: b.agentNS, RunDir: b.runDir, LogDir: filepath.Join(b.dir, "logs"),
		LoggerPath: b.logger,
	})
	if err == nil {
		cs, _ := rt.ListContainers(ctx, runtime.ListFilter{})
		for _, c := range cs {
			rt.RemoveContainer(ctx, c.ID)
		}
		network, nerr := cni.New(cni.Config{ConfDir: filepath.Join(b.dir, "net.d"), PodCIDR: podCIDR})
		sbs, _ := rt.ListSandboxes(ctx)
		for _, sb := range sbs {
			if nerr == nil && sb.NetNS() != "" {
				podns.Do(b.netns, func() error { return network.Teardown(ctx, sb.ID, sb.NetNS()) })
			}
			if err := rt.RemoveSandbox(ctx, sb.ID); err != nil {
				b.log.Warn("removing a sandbox", "sandbox", sb.ID, "err", err)
			}
		}
	}
	if err := os.RemoveAll(b.runDir); err != nil {
		b.log.Warn("removing the run dir", "dir", b.runDir, "err", err)
	}
}

// agentBinaries returns the flotilla-agent binary, with flotilla-logger
// beside it: from binDir when set, else built into dir as `make build`
// builds them (stripped, so the figures are a shipped binary's).
func agentBinaries(ctx context.Context, binDir, dir string) (string, error) {
	if binDir != "" {
		for _, name := range []string{"flotilla-agent", runtime.LoggerBinary} {
			if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
				return "", fmt.Errorf("%s: %w (run `make build`, or leave FLOTILLA_BIN unset to build it here)", name, err)
			}
		}
		return filepath.Abs(filepath.Join(binDir, "flotilla-agent"))
	}
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		return "", errors.New("no agent binary: set FLOTILLA_BIN to a directory with flotilla-agent and flotilla-logger, or run from the Flotilla module")
	}
	bin := filepath.Join(dir, "bin")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", buildtags.Tags, "-ldflags", "-s -w", "-o", bin+"/", "./cmd/flotilla-agent", "./cmd/flotilla-logger")
	cmd.Dir = filepath.Dir(mod)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building flotilla-agent: %v\n%s", err, out)
	}
	return filepath.Join(bin, "flotilla-agent"), nil
}

// process is a child process that cannot outlive this one: it is started
// from a thread that stays locked until the child exits, with SIGTERM as
// its parent-death signal.
type process struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	mu   sync.Mutex
	err  error
}

func startProcess(name string, args, env []string, logFile string) (*process, error) {
	f, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	p := &process{cmd: exec.Command(name, args...), log: logFile, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	started := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread ends with the child
		defer f.Close()
		if err := p.cmd.Start(); err != nil {
			started <- err
			close(p.done)
			return
		}
		started <- nil
		err := p.cmd.Wait()
		p.mu.Lock()
		p.err = err
		if err == nil {
			p.err = errors.New("exited with status 0")
		}
		p.mu.Unlock()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// exited returns why the process ended, nil while it runs.
func (p *process) exited() error {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.err
	default:
		return nil
	}
}

func (p *process) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("did not stop within %s of SIGTERM; killed", grace)
	}
}

// tail is the end of the process's output, for errors.
func (p *process) tail() string {
	f, err := os.Open(p.log)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 20 {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// relay accepts connections on loopback inside a network namespace and
// joins each to an address in this process's own namespace: the device
// reaches the hub without an interface in the host's namespace.
type relay struct {
	ln   net.Listener
	addr string
	wg   sync.WaitGroup
	mu   sync.Mutex
	open map[net.Conn]struct{}
}

func startRelay(netns, listen, target string) (*relay, error) {
	r := &relay{open: map[net.Conn]struct{}{}}
	if err := podns.Do(netns, func() error {
		var err error
		r.ln, err = net.Listen("tcp", listen)
		return err
	}); err != nil {
		return nil, fmt.Errorf("the relay to %s: %w", target, err)
	}
	r.addr = r.ln.Addr().String()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := r.ln.Accept()
			if err != nil {
				return
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.join(c, target)
			}()
		}
	}()
	return r, nil
}

func (r *relay) join(in net.Conn, target string) {
	out, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		in.Close()
		return
	}
	r.mu.Lock()
	r.open[in], r.open[out] = struct{}{}, struct{}{}
	r.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
	in.Close()
	out.Close()
	r.mu.Lock()
	delete(r.open, in)
	delete(r.open, out)
	r.mu.Unlock()
}

func (r *relay) stop() {
	r.ln.Close()
	r.mu.Lock()
	for c := range r.open {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
