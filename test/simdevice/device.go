package simdevice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/agent/hubclient/fromclientset"
	"flotilla.dev/flotilla/agent/kubelet"
	"flotilla.dev/flotilla/agent/kubelet/kubelettest"
	"flotilla.dev/flotilla/agent/kubelet/volumes"
	"flotilla.dev/flotilla/api"
)

// HostIP is every simulated device's address (status.hostIP of its
// pods, the host of hostNetwork pods' probes).
const HostIP = "192.0.2.1"

// Config describes one simulated device.
type Config struct {
	// Name of the Node; required.
	Name   string
	Labels map[string]string
	Taints []corev1.Taint
	// Capacity; default 4 CPUs, 8 GiB, 110 pods.
	Capacity corev1.ResourceList
	// ReadyDelay is how long starting a container takes on the device's
	// fake runtime [200ms]: a pod bound to the device is Running and
	// Ready about that long after the kubelet sees it (no readiness
	// probe; a probe adds its own delays).
	ReadyDelay time.Duration
	// RenewInterval of the Lease [10s, as the kubelet]; LeaseDuration [40s].
	RenewInterval time.Duration
	LeaseDuration time.Duration
	// NeverReady picks pods that never get Ready (a broken release): their
	// containers exit with code 1 as soon as they have started, so the
	// kubelet restarts them with its crash-loop backoff and reports them
	// Running but not Ready (CrashLoopBackOff), whatever probes they have.
	NeverReady func(*corev1.Pod) bool
	// Exits picks pods whose containers end by themselves (a Job's work):
	// they exit with the code returned as soon as they have started.
	Exits func(*corev1.Pod) (code int32, exits bool)
	// Logger receives the device's logs and its kubelet's [slog.Default(),
	// Warn and above].
	Logger *slog.Logger
}

// Device is one simulated device: its Node and Lease, and a real kubelet
// (package agent/kubelet) on the in-memory fakes of package kubelettest.
type Device struct {
	cfg    Config
	client kubernetes.Interface
	log    *slog.Logger
	// renew can be switched off to simulate a lost link.
	renew      atomic.Bool
	registered atomic.Bool
	ready      readyCounter
}

// New returns a device; Run brings it to life.
func New(client kubernetes.Interface, cfg Config) (*Device, error) {
	if cfg.Name == "" {
		return nil, errors.New("simdevice: Config.Name is required")
	}
	if cfg.Capacity == nil {
		cfg.Capacity = corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("8Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
	}
	if cfg.ReadyDelay == 0 {
		cfg.ReadyDelay = 200 * time.Millisecond
	}
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = 10 * time.Second
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 40 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(minLevel{slog.Default().Handler(), slog.LevelWarn})
	}
	d := &Device{cfg: cfg, client: client, log: log.With("device", cfg.Name)}
	d.ready.uids = map[types.UID]bool{}
	d.renew.Store(true)
	return d, nil
}

// Name is the device's Node name.
func (d *Device) Name() string { return d.cfg.Name }

// SetRenewing turns the device's link to the hub on or off. Off, the
// Lease is not renewed and the kubelet's writes (pod statuses, the
// deletions it finishes, Events) fail as if the hub were unreachable: the
// hub sees the device gone, and what it writes (Ready=False on the pods
// of an Unknown node) stands, while the kubelet keeps the pods running.
// The kubelet still hears the hub meanwhile (a pod deleted is stopped on
// the device; its deletion is finished once the link is back). On again,
// the device renews its Lease and posts its Node Ready, and the kubelet
// writes what it could not.
func (d *Device) SetRenewing(on bool) { d.renew.Store(on) }

// PodsReadied counts the pods this device has made Ready: pods whose
// status its kubelet wrote with the Ready condition True, each counted
// once.
func (d *Device) PodsReadied() int64 { return d.ready.n.Load() }

// Register creates or refreshes the Node, its Ready status and its Lease.
func (d *Device) Register(ctx context.Context) error {
	labels := map[string]string{api.LabelHostname: d.cfg.Name, api.LabelOS: "linux", api.LabelArch: "amd64"}
	for k, v := range d.cfg.Labels {
		labels[k] = v
	}
	nodes := d.client.CoreV1().Nodes()
	n, err := nodes.Get(ctx, d.cfg.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		n, err = nodes.Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: d.cfg.Name, Labels: labels},
			Spec:       corev1.NodeSpec{Taints: d.cfg.Taints},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("register node %s: %w", d.cfg.Name, err)
		}
	case err != nil:
		return fmt.Errorf("read node %s: %w", d.cfg.Name, err)
	}
	if err := d.postReady(ctx, n); err != nil {
		return err
	}
	d.registered.Store(true)
	return d.renewLease(ctx, n)
}

// postReady writes the Node's status: capacity, Ready, node info. n is
// the Node as last read, or nil.
func (d *Device) postReady(ctx context.Context, n *corev1.Node) error {
	nodes := d.client.CoreV1().Nodes()
	// The hub writes the node too (pod CIDR, taints): retry on conflict
	// with a fresh read, as the kubelet does.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if n == nil {
			var err error
			if n, err = nodes.Get(ctx, d.cfg.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		now := metav1.Now()
		n.Status.Capacity = d.cfg.Capacity
		n.Status.Allocatable = d.cfg.Capacity
		n.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "simulated device is ready", LastHeartbeatTime: now, LastTransitionTime: now,
		}}
		n.Status.NodeInfo = corev1.NodeSystemInfo{Architecture: "amd64", OperatingSystem: "linux", KubeletVersion: "simdevice"}
		// The hub accepts a pod's hostIP only if it is an address of the
		// pod's Node.
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: HostIP}}
		out, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if err != nil {
			n = nil
			return err
		}
		n = out
		return nil
	})
	if err != nil {
		return fmt.Errorf("node %s status: %w", d.cfg.Name, err)
	}
	return nil
}

func (d *Device) renewLease(ctx context.Context, n *corev1.Node) error {
	leases := d.client.CoordinationV1().Leases(api.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, d.cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: d.cfg.Name, Namespace: api.NamespaceNodeLease},
			Spec: coordv1.LeaseSpec{
				HolderIdentity:       ptr.To(d.cfg.Name),
				LeaseDurationSeconds: ptr.To(int32(d.cfg.LeaseDuration / time.Second)),
				RenewTime:            &now,
			},
		}
		if n != nil {
			// As the kubelet does: the Lease goes with its Node.
			l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}
		}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create lease %s: %w", d.cfg.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("read lease %s: %w", d.cfg.Name, err)
	}
	l.Spec.RenewTime = &now
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renew lease %s: %w", d.cfg.Name, err)
	}
	return nil
}

// Run registers the device (unless Register already did) and runs its
// kubelet until ctx ends, renewing the Lease. The kubelet runs on fakes
// made for this Run, with its pods' directories (and hostPath volumes)
// in a temporary directory removed when Run returns: a second Run is a
// device rebooted with nothing running.
func (d *Device) Run(ctx context.Context) error {
	if !d.registered.Load() {
		if err := d.Register(ctx); err != nil {
			return err
		}
	}
	root, err := os.MkdirTemp("", "simdevice-"+d.cfg.Name+"-")
	if err != nil {
		return fmt.Errorf("device %s: %w", d.cfg.Name, err)
	}
	defer d.removeRoot(root)

	rt := &simRuntime{Runtime: kubelettest.NewRuntime(), delay: d.cfg.ReadyDelay}
	images := kubelettest.NewImages()
	rt.UseImages(images)
	network := &simNetwork{client: d.client, node: d.cfg.Name}
	k, err := kubelet.New(kubelet.Config{
		NodeName:     d.cfg.Name,
		Client:       &hubClient{Interface: fromclientset.New(d.client), count: &d.ready, link: &link{name: d.cfg.Name, up: &d.renew}},
		Runtime:      rt,
		Network:      network,
		Puller:       images,
		HostIPs:      []string{HostIP},
		RootDir:      filepath.Join(root, "pods"),
		HostPathRoot: filepath.Join(root, "host"),
		Dial:         (&prober{network: network}).dial,
		Allocatable:  d.cfg.Capacity,
		Log:          d.log,
	})
	if err != nil {
		return fmt.Errorf("device %s: %w", d.cfg.Name, err)
	}
	rt.exitCode = func(uid string) (int32, bool) {
		p, ok := k.Pod(types.UID(uid))
		switch {
		case !ok:
			return 0, false
		case d.cfg.NeverReady != nil && d.cfg.NeverReady(p):
			return 1, true
		case d.cfg.Exits != nil:
			return d.cfg.Exits(p)
		}
		return 0, false
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kubeletDone := make(chan error, 1)
	go func() { kubeletDone <- k.Run(ctx) }()

	t := time.NewTicker(d.cfg.RenewInterval)
	defer t.Stop()
	offline := false
	for {
		select {
		case <-ctx.Done():
			<-kubeletDone
			return nil
		case err := <-kubeletDone:
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				err = errors.New("stopped")
			}
			return fmt.Errorf("device %s: kubelet: %w", d.cfg.Name, err)
		case <-t.C:
			if !d.renew.Load() {
				offline = true
				continue
			}
			if offline {
				// Back: the hub marked the Node Unknown meanwhile.
				if err := d.postReady(ctx, nil); err != nil {
					d.log.Debug("posting the node Ready failed", "err", err)
					continue
				}
				offline = false
			}
			if err := d.renewLease(ctx, nil); err != nil && ctx.Err() == nil {
				d.log.Debug("lease renewal failed", "err", err)
			}
		}
	}
}

// removeRoot removes a Run's directory once its kubelet has stopped: the
// pods' volumes first (memory-backed ones are tmpfs mounts when the
// process is root), then the rest.
func (d *Device) removeRoot(root string) {
	pods := filepath.Join(root, "pods")
	if vm, err := volumes.New(pods, nil); err == nil {
		if uids, err := vm.PodUIDs(); err == nil {
			for _, uid := range uids {
				if err := vm.TearDown(uid); err != nil {
					d.log.Warn("simulated device: leaving its directory", "dir", root, "err", err)
					return
				}
			}
		}
	}
	if err := os.RemoveAll(root); err != nil {
		d.log.Warn("simulated device: remove its directory", "dir", root, "err", err)
	}
}

// Fleet runs devices until ctx ends.
type Fleet struct {
	Devices []*Device
	wg      sync.WaitGroup
	errs    chan error
}

// registerParallel is how many devices StartFleet registers at once.
const registerParallel = 16

// StartFleet registers every device and runs it in the background; Wait
// returns once ctx has ended and they have stopped.
func StartFleet(ctx context.Context, client kubernetes.Interface, cfgs []Config) (*Fleet, error) {
	f := &Fleet{errs: make(chan error, len(cfgs))}
	for _, cfg := range cfgs {
		d, err := New(client, cfg)
		if err != nil {
			return nil, err
		}
		f.Devices = append(f.Devices, d)
	}
	// Registration is a handful of requests per device, made in parallel.
	regErrs := make([]error, len(f.Devices))
	sem := make(chan struct{}, registerParallel)
	var wg sync.WaitGroup
	for i, d := range f.Devices {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			regErrs[i] = d.Register(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(regErrs...); err != nil {
		return nil, err
	}
	for _, d := range f.Devices {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			if err := d.Run(ctx); err != nil {
				f.errs <- err
			}
		}()
	}
	return f, nil
}

// Wait waits for the devices to stop and returns their errors.
func (f *Fleet) Wait() error {
	f.wg.Wait()
	close(f.errs)
	var errs []error
	for err := range f.errs {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Named returns n device configs "<prefix>-0".."<prefix>-(n-1)", each
// modified by mod when not nil.
func Named(prefix string, n int, mod func(i int, c *Config)) []Config {
	out := make([]Config, n)
	for i := range out {
		out[i] = Config{Name: fmt.Sprintf("%s-%d", prefix, i)}
		if mod != nil {
			mod(i, &out[i])
		}
	}
	return out
}

// minLevel drops records below a level.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(attrs), h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}
