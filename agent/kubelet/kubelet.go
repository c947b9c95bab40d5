package kubelet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/agent/kubelet/probes"
	"flotilla.dev/flotilla/agent/kubelet/status"
	"flotilla.dev/flotilla/agent/kubelet/volumes"
	"flotilla.dev/flotilla/agent/runtime"
	"flotilla.dev/flotilla/agent/runtime/podns"
	"flotilla.dev/flotilla/api"
)

// Kubelet runs the pods bound to one device.
type Kubelet struct {
	cfg      Config
	log      *slog.Logger
	rt       Runtime
	sources  sources
	hub      *HubSource
	cache    *CacheSource
	recorder record.EventRecorder
	stopRec  func()

	objects *objectCache
	volumes *volumes.Manager
	probes  *probes.Manager
	runner  *probes.Runner
	status  *status.Manager
	workers *podWorkers

	crashBackoff *backoff
	imageBackoff *backoff
	prepulls     prepulls

	mu          sync.Mutex
	imageIDs    map[string]string    // containerd image name -> repo@digest
	containers  map[string]types.UID // container ID -> pod UID, for events
	hostIPs     []string
	hostIPsRead time.Time
	synced      bool
}

// PodCounts is what the node code reports about pods.
type PodCounts struct {
	// Desired pods are bound to this device (from every source).
	Desired int
	// Pending have not started all their containers yet; Running have;
	// Terminating are being stopped.
	Pending, Running, Terminating int
}

// New checks cfg and returns a Kubelet; Run starts it.
func New(cfg Config) (*Kubelet, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	k := &Kubelet{
		cfg: cfg, log: cfg.Log.With("component", "kubelet", "node", cfg.NodeName), rt: cfg.Runtime,
		crashBackoff: newBackoff(cfg.CrashLoopBackoff.Initial, cfg.CrashLoopBackoff.Max, cfg.CrashLoopBackoff.Reset),
		imageBackoff: newBackoff(cfg.ImagePullBackoff.Initial, cfg.ImagePullBackoff.Max, cfg.ImagePullBackoff.Reset),
		prepulls:     prepulls{state: map[types.UID]*prepull{}},
		imageIDs:     map[string]string{},
		containers:   map[string]types.UID{},
		hostIPs:      cfg.HostIPs,
	}
	if cfg.Allocatable == nil {
		k.cfg.Allocatable = machineAllocatable()
	}
	if !cfg.DisableHubSource {
		k.hub = NewHubSource(cfg.Client, cfg.NodeName)
		k.sources = append(k.sources, k.hub)
	}
	k.sources = append(k.sources, cfg.Sources...)
	if len(k.sources) == 0 {
		return nil, fmt.Errorf("%w: no pod source (the hub source is disabled and Sources is empty)", ErrConfig)
	}
	k.workers = newPodWorkers(k.syncPod, cfg.ResyncInterval, cfg.SyncErrorBackoff.Initial, cfg.SyncErrorBackoff.Max,
		func(uid types.UID, err error) {
			if errors.Is(err, errWaiting) {
				// Bad input: already in the pod's status and Events.
				k.log.Debug("pod waits; will retry", "pod-uid", uid, "err", err)
				return
			}
			k.log.Warn("pod sync failed; will retry", "pod-uid", uid, "err", err)
		})
	k.objects = newObjectCache(cfg.Client, k.workers.Poke)
	if cfg.Store != nil {
		k.objects.store, k.objects.log = cfg.Store, k.log
		if k.hub == nil {
			return nil, fmt.Errorf("%w: a local store caches the hub's pods, but the hub source is disabled", ErrConfig)
		}
		cs, err := NewCacheSource(k.hub, cfg.Store, k.log)
		if err != nil {
			return nil, err
		}
		k.cache = cs
		// Right after the hub: the hub's own pods win once it syncs.
		k.sources = append(sources{k.hub, cs}, k.sources[1:]...)
	}
	k.volumes, err = volumes.New(cfg.RootDir, k.objects)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	k.volumes.HostRoot = cfg.HostPathRoot
	k.runner = &probes.Runner{Exec: cfg.Runtime, Dial: k.dial}
	k.probes = probes.NewManager(probes.Config{Runner: k.runner, OnChange: k.workers.Poke, Reporter: probeReporter{k}})
	k.status = status.New(cfg.Client, k.hubPod, status.Options{Log: k.log})
	return k, nil
}

// hubPod is the status manager's view of a pod on the hub: the pod
// itself, or for a static pod its mirror, which carries its status.
func (k *Kubelet) hubPod(uid types.UID) (*corev1.Pod, bool) {
	if k.hub == nil {
		return nil, false
	}
	if p, ok := k.hub.Get(uid); ok {
		return p, true
	}
	for _, s := range k.sources {
		if s == PodSource(k.hub) || s == PodSource(k.cache) {
			continue
		}
		if p, ok := s.Get(uid); ok {
			return k.hub.mirrorOf(p)
		}
	}
	return nil, false
}

// Run runs the kubelet until ctx ends. Pods keep running after it
// returns: containers outlive the agent, and a new agent adopts them.
func (k *Kubelet) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	switch {
	case k.cfg.Recorder != nil:
		k.recorder = k.cfg.Recorder
	case k.cfg.Client == nil:
		k.recorder = logRecorder{k.log}
	default:
		b := record.NewBroadcaster(record.WithContext(ctx))
		b.StartRecordingToSink(&hubclient.EventSink{Client: k.cfg.Client})
		k.recorder = b.NewRecorder(api.Scheme, corev1.EventSource{Component: "kubelet", Host: k.cfg.NodeName})
		defer b.Shutdown()
	}
	k.objects.start(ctx)

	var wg sync.WaitGroup
	errs := make(chan error, len(k.sources)+3)
	goRun := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	goRun("status manager", func() error { return k.status.Run(ctx) })
	goRun("containerd events", func() error { return k.rt.Watch(ctx, k.onRuntimeEvent) })
	for _, s := range k.sources {
		goRun("pod source "+s.Name(), func() error { return s.Run(ctx, k.workers.Poke) })
	}
	if k.hub != nil {
		goRun("status after the hub syncs", func() error {
			if cache.WaitForCacheSync(ctx.Done(), k.hub.HasSynced) {
				k.status.QueueAll()
			}
			return nil
		})
	}
	k.workers.start(ctx)
	goRun("housekeeping", func() error { k.housekeeping(ctx); return nil })
	k.log.Info("kubelet started", "sources", len(k.sources), "root", k.cfg.RootDir)

	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
		cancel()
	}
	wg.Wait()
	k.workers.wait()
	return err
}

// Pod returns the pod with uid as the device is asked to run it, from
// the first source that has it.
func (k *Kubelet) Pod(uid types.UID) (*corev1.Pod, bool) {
	return k.sources.get(uid)
}

// PodCounts tallies the device's pods.
func (k *Kubelet) PodCounts() PodCounts {
	pending, running, terminating := k.workers.counts()
	return PodCounts{Desired: len(k.sources.list()), Pending: pending, Running: running, Terminating: terminating}
}

// housekeeping resyncs every desired pod and, once every source has
// synced, finds pods that run but are desired by none (deleted while the
// agent was down, force-deleted, moved) and pokes their workers, which
// stop them.
func (k *Kubelet) housekeeping(ctx context.Context) {
	t := time.NewTicker(k.cfg.HousekeepingInterval)
	defer t.Stop()
	for tick := 0; ; tick++ {
		if k.sources.synced() {
			if !k.synced {
				k.synced = true
				k.log.Info("pod sources synced", "desired", len(k.sources.list()))
			}
			// Sandboxes and pod directories are cheap to list; container
			// records (which alone remain of a pod deleted while the
			// device was rebooting) cost containerd calls, so they are
			// looked at every fifth round.
			k.findOrphans(ctx, tick%5 == 0)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (k *Kubelet) findOrphans(ctx context.Context, containers bool) {
	desired := k.sources.list()
	seen := map[types.UID]bool{}
	if containers {
		if cs, err := k.rt.ListContainers(ctx, runtime.ListFilter{}); err == nil {
			for _, c := range cs {
				seen[types.UID(c.Pod.UID)] = true
				k.rememberContainer(c.ID, types.UID(c.Pod.UID))
			}
		} else {
			k.log.Warn("list containers", "err", err)
		}
	}
	if sbs, err := k.rt.ListSandboxes(ctx); err == nil {
		for _, sb := range sbs {
			seen[types.UID(sb.ID)] = true
		}
	}
	if uids, err := k.volumes.PodUIDs(); err == nil {
		for _, u := range uids {
			seen[u] = true
		}
	}
	for uid := range seen {
		if _, ok := desired[uid]; !ok && !k.workers.has(uid) {
			k.log.Info("found an orphaned pod; stopping it", "pod-uid", uid)
			k.workers.Poke(uid)
		}
	}
}

func (k *Kubelet) rememberContainer(id string, uid types.UID) {
	k.mu.Lock()
	k.containers[id] = uid
	k.mu.Unlock()
}

// onRuntimeEvent pokes the pod of a container that started, exited or
// was OOM-killed.
func (k *Kubelet) onRuntimeEvent(ev runtime.Event) {
	k.mu.Lock()
	uid, ok := k.containers[ev.ContainerID]
	k.mu.Unlock()
	if !ok {
		c, err := k.rt.ContainerStatus(context.Background(), ev.ContainerID)
		if err != nil {
			return
		}
		uid = types.UID(c.Pod.UID)
		k.rememberContainer(ev.ContainerID, uid)
	}
	k.workers.Poke(uid)
}

// dial connects from the device's network namespace (or with
// Config.Dial).
func (k *Kubelet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if k.cfg.Dial != nil {
		return k.cfg.Dial(ctx, network, addr)
	}
	d := &net.Dialer{}
	if k.cfg.NetNSPath == "" {
		return d.DialContext(ctx, network, addr)
	}
	var c net.Conn
	err := podns.Do(k.cfg.NetNSPath, func() error {
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// inHostNS runs fn in the device's network namespace.
func (k *Kubelet) inHostNS(fn func() error) error {
	if k.cfg.NetNSPath == "" {
		return fn()
	}
	return podns.Do(k.cfg.NetNSPath, fn)
}

// nodeHostIPs returns the device's IPs: configured, or the Node's
// InternalIP addresses (read at most every 30 s until found).
func (k *Kubelet) nodeHostIPs(ctx context.Context) []string {
	k.mu.Lock()
	ips, last := k.hostIPs, k.hostIPsRead
	k.mu.Unlock()
	if len(ips) > 0 || time.Since(last) < 30*time.Second || k.cfg.Client == nil {
		return ips
	}
	k.mu.Lock()
	k.hostIPsRead = time.Now()
	k.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	node, err := k.cfg.Client.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ips = append(ips, a.Address)
		}
	}
	k.mu.Lock()
	k.hostIPs = ips
	k.mu.Unlock()
	return ips
}

// machineAllocatable is the machine's CPUs and memory.
func machineAllocatable() corev1.ResourceList {
	out := corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(int64(goruntime.NumCPU()), resource.DecimalSI)}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					out[corev1.ResourceMemory] = *resource.NewQuantity(kb*1024, resource.BinarySI)
				}
			}
		}
	}
	return out
}

// event records an Event on a pod, or on one of its containers.
func (k *Kubelet) event(pod *corev1.Pod, container, typ, reason, format string, args ...any) {
	if pod == nil || k.recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion}
	if container != "" {
		ref.FieldPath = fieldPath(pod, container)
	}
	k.recorder.Eventf(ref, typ, reason, format, args...)
}

func fieldPath(pod *corev1.Pod, name string) string {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return "spec.initContainers{" + name + "}"
		}
	}
	return "spec.containers{" + name + "}"
}

type probeReporter struct{ k *Kubelet }

func (r probeReporter) ProbeFailed(pod *corev1.Pod, container string, kind probes.Kind, output string) {
	r.k.event(pod, container, corev1.EventTypeWarning, "Unhealthy", "%s probe failed: %s", kind, strings.TrimSpace(output))
}

// errWaiting marks a sync that left a container waiting for a reason
// already recorded (and evented); the worker retries after the delay.
var errWaiting = errors.New("container is waiting")

// logRecorder reports a standalone device's events in its log, the only
// place anyone will read them.
type logRecorder struct{ log *slog.Logger }

func (r logRecorder) Event(obj kruntime.Object, typ, reason, message string) {
	level := slog.LevelInfo
	if typ == corev1.EventTypeWarning {
		level = slog.LevelWarn
	}
	ref, _ := obj.(*corev1.ObjectReference)
	var what string
	if ref != nil {
		what = ref.Namespace + "/" + ref.Name
		if ref.FieldPath != "" {
			what += " " + ref.FieldPath
		}
	}
	r.log.Log(context.Background(), level, message, "event", reason, "object", what)
}

func (r logRecorder) Eventf(obj kruntime.Object, typ, reason, format string, args ...any) {
	r.Event(obj, typ, reason, fmt.Sprintf(format, args...))
}

func (r logRecorder) AnnotatedEventf(obj kruntime.Object, _ map[string]string, typ, reason, format string, args ...any) {
	r.Eventf(obj, typ, reason, format, args...)
}
