package kubelet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/agent/localstore"
)

// ErrConfig is returned by New for a configuration that cannot work.
var ErrConfig = errors.New("invalid kubelet configuration")

// DefaultRootDir holds pods' volumes.
const DefaultRootDir = "/var/lib/flotilla/agent/pods"

// Config configures a Kubelet. Zero tunables take Kubernetes' values.
type Config struct {
	// NodeName is this device's Node name (required).
	NodeName string
	// Client talks to the hub (it may be unreachable at times); nil only
	// for a standalone device (DisableHubSource), which reports nothing.
	Client hubclient.Interface
	// Runtime, Network and Puller run pods (Runtime and Puller required;
	// without Network only hostNetwork pods can start).
	Runtime Runtime
	Network Network
	Puller  Images
	// Recorder writes Events; one writing through Client is made when nil.
	Recorder record.EventRecorder
	// HostIPs are reported as status.hostIP(s); when empty they are read
	// from the Node's InternalIP addresses.
	HostIPs []string
	// ClusterDNS and ClusterDomain shape ClusterFirst pods' resolv.conf;
	// with no ClusterDNS, pods use the device's resolv.conf.
	ClusterDNS    []string
	ClusterDomain string
	// NetNSPath is the network namespace the device's pod network lives in
	// (CNI runs there and probes dial from there); "" means the agent's
	// own. Tests give each agent a private one.
	NetNSPath string
	// RootDir holds pods' volumes; DefaultRootDir when empty.
	RootDir string
	// HostPathRoot, when set, is where hostPath volumes resolve: a pod's
	// hostPath /data is HostPathRoot/data, created there for the
	// ...OrCreate types. Simulated devices keep them in a temporary
	// directory; "" is the machine's root, as on a device.
	HostPathRoot string
	// Dial, when set, connects httpGet, tcpSocket and grpc probes and
	// lifecycle hooks to pods instead of dialing from NetNSPath:
	// simulated devices answer them in memory.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Allocatable stands in for unset limits in resourceFieldRef; the
	// machine's CPUs and memory when nil.
	Allocatable corev1.ResourceList
	// Sources are more desired-pod sources, consulted after the hub's
	// (static pods, the local cache). A pod UID in several sources is
	// taken from the first.
	Sources []PodSource
	// PodCIDR is the device's pod range; a sandbox whose address lies
	// outside it (the hub gave the device another range) is made again.
	PodCIDR *net.IPNet
	// Store, when set, keeps the hub's pods and the ConfigMaps and
	// Secrets they use on the device, and serves them (a CacheSource)
	// until the hub source syncs: a restart without the hub runs what
	// ran before.
	Store *localstore.Store
	// DisableHubSource runs without the hub's informer (for agents that
	// only run local pods; Client is still used for Events and status).
	DisableHubSource bool
	Log              *slog.Logger

	// CrashLoopBackoff: first delay, cap, and how long a container must
	// run for its backoff to reset (10 s, 5 min, 10 min).
	CrashLoopBackoff Backoff
	// ImagePullBackoff: first delay and cap (10 s, 5 min).
	ImagePullBackoff Backoff
	// ResyncInterval: every pod is reconciled at least this often (10 s).
	ResyncInterval time.Duration
	// HousekeepingInterval: how often orphans are looked for (2 s).
	HousekeepingInterval time.Duration
	// SyncErrorBackoff bounds the retry of a pod whose sync failed
	// (500 ms doubling to 30 s).
	SyncErrorBackoff Backoff
	// MinGracePeriod is the least time a container gets between its stop
	// signal and SIGKILL (2 s, as the kubelet's minimum).
	MinGracePeriod time.Duration
	// OrphanGracePeriod is the grace of containers whose pod the agent
	// never saw (found in containerd after a restart); 2 s.
	OrphanGracePeriod time.Duration
}

// Backoff is an exponential delay.
type Backoff struct {
	Initial, Max, Reset time.Duration
}

func (c Config) withDefaults() (Config, error) {
	var problems []error
	if c.NodeName == "" {
		problems = append(problems, errors.New("NodeName is required"))
	}
	if c.Client == nil && !c.DisableHubSource {
		problems = append(problems, errors.New("Client is required with the hub source"))
	}
	if c.Runtime == nil {
		problems = append(problems, errors.New("Runtime is required"))
	}
	if c.Puller == nil {
		problems = append(problems, errors.New("Puller is required"))
	}
	if c.RootDir == "" {
		c.RootDir = DefaultRootDir
	}
	if !filepath.IsAbs(c.RootDir) {
		problems = append(problems, fmt.Errorf("RootDir %q must be absolute", c.RootDir))
	}
	if c.HostPathRoot != "" && !filepath.IsAbs(c.HostPathRoot) {
		problems = append(problems, fmt.Errorf("HostPathRoot %q must be absolute", c.HostPathRoot))
	}
	if err := errors.Join(problems...); err != nil {
		return c, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.ClusterDomain == "" {
		c.ClusterDomain = "cluster.local"
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	c.CrashLoopBackoff = c.CrashLoopBackoff.or(10*time.Second, 5*time.Minute, 10*time.Minute)
	c.ImagePullBackoff = c.ImagePullBackoff.or(10*time.Second, 5*time.Minute, 10*time.Minute)
	c.SyncErrorBackoff = c.SyncErrorBackoff.or(500*time.Millisecond, 30*time.Second, 0)
	if c.ResyncInterval <= 0 {
		c.ResyncInterval = 10 * time.Second
	}
	if c.HousekeepingInterval <= 0 {
		c.HousekeepingInterval = 2 * time.Second
	}
	if c.MinGracePeriod <= 0 {
		c.MinGracePeriod = 2 * time.Second
	}
	if c.OrphanGracePeriod <= 0 {
		c.OrphanGracePeriod = 2 * time.Second
	}
	return c, nil
}

func (b Backoff) or(initial, max, reset time.Duration) Backoff {
	if b.Initial <= 0 {
		b.Initial = initial
	}
	if b.Max <= 0 {
		b.Max = max
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	if b.Reset <= 0 {
		b.Reset = reset
	}
	return b
}
