package agentbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"

	"flotilla.dev/flotilla/agent/runtime"
	"flotilla.dev/flotilla/bench/kubebuild"
	"flotilla.dev/flotilla/registry"
	"flotilla.dev/flotilla/test/testimage"
)

// criNamespace is the containerd namespace of containerd's CRI plugin,
// where the kubelet's pods and images live.
const criNamespace = "k8s.io"

// PausePackage is the program of the sandbox image the kubelet's pods get
// here: the one its CRI config names is not on this machine, and pulling
// it would need the internet.
const PausePackage = "flotilla.dev/flotilla/bench/agent/pause"

// ErrNotRoot is a run without root, which the kubelet needs.
var ErrNotRoot = errors.New("the kubelet needs root (cgroups, mounts, containerd's socket)")

// KubeletOptions shape a run of the upstream kubelet; zero values take the
// agent's figures' (20 pods, 15 s settle, 10 samples a second apart).
type KubeletOptions struct {
	// Binary is the kubelet (bench/kubebuild builds it); Version names it.
	Binary, Version string
	Pods            int
	Settle          time.Duration
	Samples         int
	SampleEvery     time.Duration
	// Log receives progress; discarded when nil.
	Log *slog.Logger
}

func (o KubeletOptions) withDefaults() KubeletOptions {
	a := Options{LoadedPods: o.Pods, Settle: o.Settle, Samples: o.Samples, SampleEvery: o.SampleEvery, Log: o.Log}.withDefaults()
	o.Pods, o.Settle, o.Samples, o.SampleEvery, o.Log = a.LoadedPods, a.Settle, a.Samples, a.SampleEvery, a.Log
	return o
}

// KubeletResults are the upstream kubelet's figures.
type KubeletResults struct {
	Version string
	// Pods is how many pods the loaded figure is for.
	Pods int
	// BinarySize is the kubelet binary's size in bytes.
	BinarySize int64
	// Idle is the kubelet running with no pods; Loaded with
	// KubeletOptions.Pods static pods' containers running. The Go runtime
	// fields are zero: the kubelet's /metrics is not read.
	Idle, Loaded Memory
	Window       time.Duration
	// CgroupDriver is the one the kubelet was given, SandboxImage the CRI
	// plugin's pause image; PauseBuilt says it was built from
	// PausePackage, not found in containerd.
	CgroupDriver, SandboxImage string
	PauseBuilt                 bool
	// NoPods says why the kubelet could not run pods here, when it could
	// not: Loaded is then empty.
	NoPods string
}

// RunKubelet runs the upstream kubelet standalone (no API server: static
// pods from a directory) on the machine's containerd through its CRI
// plugin, and measures it as Run measures the agent: idle, then with
// o.Pods pods of the same test image. It needs root, containerd with its
// CRI plugin enabled, runc and docker-registry. Everything it creates is
// removed before it returns (see kubeletRun.close).
func RunKubelet(ctx context.Context, o KubeletOptions) (res KubeletResults, err error) {
	o = o.withDefaults()
	res.Version = o.Version
	res.Window = time.Duration(o.Samples-1) * o.SampleEvery
	res.Pods = o.Pods
	if os.Geteuid() != 0 {
		return res, ErrNotRoot
	}
	st, err := os.Stat(o.Binary)
	if err != nil {
		return res, fmt.Errorf("the kubelet binary: %w", err)
	}
	res.BinarySize = st.Size()
	k, err := newKubeletRun(ctx, o)
	if err != nil {
		return res, err
	}
	defer k.close()
	res.CgroupDriver, res.SandboxImage, res.PauseBuilt = k.cgroupDriver, k.sandboxImage, k.pauseBuilt

	o.Log.Info("kubelet healthy; settling before the idle sample", "settle", o.Settle)
	if err := sleep(ctx, o.Settle); err != nil {
		return res, err
	}
	if res.Idle, err = k.measure(ctx, o, 0); err != nil {
		return res, fmt.Errorf("the kubelet's idle memory: %w", err)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return res, err
	}
	if res.NoPods = sandboxOOMScoreProblem(k.criConfig, string(status)); res.NoPods != "" {
		return res, nil
	}
	if err := k.startPods(ctx, o.Pods); err != nil {
		return res, err
	}
	o.Log.Info("pods running; settling before the loaded sample", "pods", o.Pods)
	if err := sleep(ctx, o.Settle); err != nil {
		return res, err
	}
	if res.Loaded, err = k.measure(ctx, o, o.Pods); err != nil {
		return res, fmt.Errorf("the kubelet's memory with %d pods: %w", o.Pods, err)
	}
	if err := k.stopPods(ctx); err != nil {
		return res, err
	}
	return res, nil
}

// kubeletRun is one run's world: images in the CRI plugin's namespace, the
// kubelet's dirs and process, and what the kubelet changes on the host.
// close undoes everything, in reverse order, whatever got set up.
type kubeletRun struct {
	o    KubeletOptions
	log  *slog.Logger
	id   string
	dir  string
	undo []func()
	ctrd *containerd.Client
	cri  *criClient
	// podNS is the namespace of the static pods: it tells the run's
	// sandboxes and containers from any other in the CRI plugin.
	podNS        string
	criConfig    criConfig
	image        string
	sandboxImage string
	pauseBuilt   bool
	cgroupDriver string
	manifests    string
	kubelet      *process
	healthz      string
	host         *hostState
}

func (k *kubeletRun) onClose(f func()) { k.undo = append(k.undo, f) }

func (k *kubeletRun) close() {
	for i := len(k.undo) - 1; i >= 0; i-- {
		k.undo[i]()
	}
	k.undo = nil
}

func newKubeletRun(ctx context.Context, o KubeletOptions) (_ *kubeletRun, err error) {
	k := &kubeletRun{o: o, log: o.Log}
	defer func() {
		if err != nil {
			k.close()
		}
	}()
	k.dir, err = os.MkdirTemp("", "flotilla-bench-kubelet-")
	if err != nil {
		return nil, err
	}
	k.id = strings.TrimPrefix(filepath.Base(k.dir), "flotilla-bench-kubelet-")
	k.podNS = "flotilla-bench-kubelet-" + k.id
	k.onClose(func() { os.RemoveAll(k.dir) })

	k.ctrd, err = containerd.New(runtime.DefaultSocket, containerd.WithTimeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("containerd at %s: %w", runtime.DefaultSocket, err)
	}
	k.onClose(func() { k.ctrd.Close() })
	if err := criPluginEnabled(ctx, k.ctrd); err != nil {
		return nil, err
	}
	k.cri, err = dialCRI(runtime.DefaultSocket)
	if err != nil {
		return nil, err
	}
	k.onClose(func() { k.cri.close() })
	cfg, err := k.cri.config(ctx)
	if err != nil {
		return nil, err
	}
	k.criConfig, k.sandboxImage, k.cgroupDriver = cfg, cfg.sandboxImage, cfg.cgroupDriver

	// Noted before the kubelet first runs, restored after it last ran.
	k.host, err = readHostState()
	if err != nil {
		return nil, err
	}
	k.onClose(func() {
		for _, err := range k.host.restore() {
			k.log.Warn("restoring what the kubelet changed on the host", "err", err)
		}
	})
	if err := k.images(ctx); err != nil {
		return nil, err
	}
	if err := k.startKubelet(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// images puts the test image and, unless the CRI plugin has one, a pause
// image under the sandbox image's name into the CRI plugin's namespace,
// from a registry on loopback. Only images this run created are removed
// at close, and the namespace when this run created it.
func (k *kubeletRun) images(ctx context.Context) error {
	reg, err := startRegistry(k.dir)
	if err != nil {
		return err
	}
	defer reg.stop()
	k.log.Info("building the test and pause images")
	app, err := testimage.BuildImage(&testimage.Registry{Host: reg.host}, "testapp", testimage.AppPackage, testimage.Options{ExposedPorts: []string{"8080/tcp"}})
	if err != nil {
		return fmt.Errorf("the test image: %w", err)
	}
	k.image = app.Ref

	nctx := namespaces.WithNamespace(ctx, criNamespace)
	nss, err := k.ctrd.NamespaceService().List(ctx)
	if err != nil {
		return fmt.Errorf("containerd namespaces: %w", err)
	}
	if !contains(nss, criNamespace) {
		if err := k.ctrd.NamespaceService().Create(nctx, criNamespace, nil); err != nil {
			return fmt.Errorf("create containerd namespace %s: %w", criNamespace, err)
		}
		k.onClose(func() {
			// Deleting a namespace that still holds something fails,
			// which is what this wants: only an empty one goes.
			if err := k.ctrd.NamespaceService().Delete(namespaces.WithNamespace(context.Background(), criNamespace), criNamespace); err != nil {
				k.log.Warn("removing the containerd namespace this run created", "namespace", criNamespace, "err", err)
			}
		})
	}
	is := k.ctrd.ImageService()
	own := func(name string) {
		k.onClose(func() {
			if err := is.Delete(namespaces.WithNamespace(context.Background(), criNamespace), name, images.SynchronousDelete()); err != nil && !errdefs.IsNotFound(err) {
				k.log.Warn("removing an image", "image", name, "err", err)
			}
		})
	}
	p, err := registry.NewPuller(k.ctrd, registry.PullerConfig{Namespace: criNamespace})
	if err != nil {
		return err
	}
	// pull puts an image into the namespace by its digest-pinned name.
	// The CRI plugin adds a name of its own, the config's digest, to each
	// image it sees: that one is removed too, unless it was there before.
	pull := func(img testimage.Image) (images.Image, error) {
		names := []string{img.Ref, digest.FromBytes(img.Config).String()}
		var added []string
		for _, name := range names {
			if _, err := is.Get(nctx, name); errdefs.IsNotFound(err) {
				added = append(added, name)
			}
		}
		pulled, err := p.Pull(ctx, img.Ref)
		if err != nil {
			return images.Image{}, fmt.Errorf("pull %s into %s: %w", img.Ref, criNamespace, err)
		}
		for _, name := range added {
			own(name)
		}
		return is.Get(nctx, pulled.Image.Name())
	}
	if _, err := pull(app); err != nil {
		return err
	}
	if _, err := is.Get(nctx, k.sandboxImage); err == nil {
		k.log.Info("the CRI plugin's sandbox image is present; using it", "image", k.sandboxImage)
		return nil
	} else if !errdefs.IsNotFound(err) {
		return fmt.Errorf("the sandbox image %s: %w", k.sandboxImage, err)
	}
	pause, err := testimage.BuildImage(&testimage.Registry{Host: reg.host}, "pause", PausePackage, testimage.Options{})
	if err != nil {
		return fmt.Errorf("the pause image: %w", err)
	}
	img, err := pull(pause)
	if err != nil {
		return err
	}
	if _, err := is.Create(nctx, images.Image{Name: k.sandboxImage, Target: img.Target}); err != nil {
		return fmt.Errorf("naming the pause image %s: %w", k.sandboxImage, err)
	}
	own(k.sandboxImage)
	k.pauseBuilt = true
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// startKubelet writes the kubelet's config and starts it, and waits until
// its healthz answers.
func (k *kubeletRun) startKubelet(ctx context.Context) error {
	k.manifests = filepath.Join(k.dir, "manifests")
	if err := os.MkdirAll(k.manifests, 0o755); err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	cfg := kubeletConfig(kubeletConfigParams{
		StaticPodPath: k.manifests, PodLogsDir: filepath.Join(k.dir, "pod-logs"),
		CgroupDriver: k.cgroupDriver, Endpoint: "unix://" + runtime.DefaultSocket,
		Port: ports[0], HealthzPort: ports[1],
	})
	cfgPath := filepath.Join(k.dir, "kubelet.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	root := filepath.Join(k.dir, "root")
	// Mounts the kubelet leaves under its root dir go before the dir.
	k.onClose(func() {
		for _, err := range unmountUnder(root) {
			k.log.Warn("unmounting under the kubelet's root dir", "err", err)
		}
	})
	args := []string{"--config", cfgPath, "--root-dir", root, "--cert-dir", filepath.Join(k.dir, "pki"), "--v", "0"}
	k.kubelet, err = startProcess(k.o.Binary, args, nil, filepath.Join(k.dir, "kubelet.log"))
	if err != nil {
		return fmt.Errorf("starting the kubelet: %w", err)
	}
	k.onClose(k.stopKubelet)
	k.healthz = fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[1])
	c := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(60 * time.Second); ; {
		if err := k.kubelet.exited(); err != nil {
			return fmt.Errorf("the kubelet exited: %w\n%s", err, k.kubelet.tail())
		}
		resp, err := c.Get(k.healthz)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the kubelet's healthz did not answer 200 within 60s\n%s", k.kubelet.tail())
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// stopKubelet stops the kubelet, then removes what of its pods is left
// in the CRI plugin (the sandboxes of the run's pod namespace, with their
// containers: through the CRI API, so that the plugin's own records go
// too) and their log links in /var/log/containers.
func (k *kubeletRun) stopKubelet() {
	if err := k.kubelet.stop(30 * time.Second); err != nil {
		k.log.Warn("stopping the kubelet", "err", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := k.cri.removeSandboxes(ctx, k.podNS); err != nil {
		k.log.Warn("removing the kubelet's pod sandboxes", "err", err)
	}
	k.host.removeLogLinks(filepath.Join(k.dir, "pod-logs"))
}

// measure samples the kubelet process's memory and checks that its pods
// still run.
func (k *kubeletRun) measure(ctx context.Context, o KubeletOptions, pods int) (Memory, error) {
	pid := k.kubelet.pid()
	if err := checkExe(pid, filepath.Base(o.Binary)); err != nil {
		return Memory{}, err
	}
	m, err := sampleMemory(ctx, pid, o.Samples, o.SampleEvery)
	if err != nil {
		return m, err
	}
	m.Pods = pods
	running, err := k.cri.runningContainers(ctx, k.podNS)
	if err != nil {
		return m, err
	}
	if running != pods {
		return m, fmt.Errorf("%d of the kubelet's %d containers run after the sampling\n%s", running, pods, k.kubelet.tail())
	}
	return m, nil
}

// startPods writes n static pod manifests at once, as a rollout lands on
// a device, and waits until each pod's container runs.
func (k *kubeletRun) startPods(ctx context.Context, n int) error {
	ports, err := freePorts(n)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("load-%d.yaml", i)
		manifest := staticPod(fmt.Sprintf("load-%d", i), k.podNS, k.image, fmt.Sprintf("127.0.0.1:%d", ports[i]))
		// The kubelet skips names that start with a dot: the manifest
		// appears whole.
		tmp := filepath.Join(k.manifests, "."+name)
		if err := os.WriteFile(tmp, []byte(manifest), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(k.manifests, name)); err != nil {
			return err
		}
	}
	k.onClose(func() {
		if err := k.stopPods(context.Background()); err != nil {
			k.log.Warn("stopping the kubelet's pods", "err", err)
		}
	})
	for deadline := time.Now().Add(3 * time.Minute); ; {
		running, err := k.cri.runningContainers(ctx, k.podNS)
		if err != nil {
			return err
		}
		if running == n {
			return nil
		}
		if err := k.kubelet.exited(); err != nil {
			return fmt.Errorf("the kubelet exited: %w\n%s", err, k.kubelet.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d static pods' containers run after 3m\n%s", running, n, k.kubelet.tail())
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// stopPods removes the manifests and waits until the kubelet has stopped
// the pods' containers.
func (k *kubeletRun) stopPods(ctx context.Context) error {
	entries, err := os.ReadDir(k.manifests)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(k.manifests, e.Name())); err != nil {
			return err
		}
	}
	for deadline := time.Now().Add(2 * time.Minute); ; {
		running, err := k.cri.runningContainers(ctx, k.podNS)
		if err != nil {
			return err
		}
		if running == 0 {
			return nil
		}
		if k.kubelet.exited() != nil {
			return fmt.Errorf("the kubelet exited with %d containers running", running)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of the kubelet's containers still run 2m after their manifests went", running)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// freePorts returns n distinct ports free on loopback now.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Lines are the kubelet's figures, each beside the agent's (agent, from
// the same run; zero when it did not run).
func (r KubeletResults) Lines(agent Results) []string {
	mb := func(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/(1<<20)) }
	name := "upstream kubelet " + r.Version
	out := []string{fmt.Sprintf("%-44s %s  (built as its release is: static, -trimpath, -s -w, tags %s)",
		name+" binary, stripped", mb(r.BinarySize), kubebuild.Tags)}
	for _, m := range []struct {
		name  string
		m     Memory
		agent Memory
	}{{name + " RSS idle", r.Idle, agent.Idle}, {fmt.Sprintf("%s RSS with %d pods", name, r.Loaded.Pods), r.Loaded, agent.Loaded}} {
		if m.m.RSS == 0 {
			continue
		}
		beside := ""
		if m.agent.RSS > 0 {
			beside = fmt.Sprintf("  (agent %s: anon %s + file %s)", mb(m.agent.RSS), mb(m.agent.Anon), mb(m.agent.File))
		}
		out = append(out, fmt.Sprintf("%-44s %s%s  peak %s; anon %s + file %s; touched in %v: anon %s + file %s; CPU %.2f%% of a core",
			m.name, mb(m.m.RSS), beside, mb(m.m.Peak), mb(m.m.Anon), mb(m.m.File), r.Window, mb(m.m.WorkingSetAnon), mb(m.m.WorkingSetFile), m.m.CPU*100))
	}
	if r.NoPods != "" {
		out = append(out, fmt.Sprintf("%-44s not measured: %s", fmt.Sprintf("%s RSS with %d pods", name, r.Pods), r.NoPods))
	}
	pause := "containerd's"
	if r.PauseBuilt {
		pause = "a pause built here"
	}
	out = append(out, fmt.Sprintf("%-44s standalone (static pods, no API server) on containerd's CRI plugin, cgroup driver %s, sandbox image %s (%s); pods on the host's network (the agent's have their own), images not verified",
		name+" setup", r.CgroupDriver, r.SandboxImage, pause))
	return out
}
