package hubtest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/api/image"
	"flotilla.dev/flotilla/api/validation"
	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/apiserver"
)

// Hub is a hub running for one test.
type Hub struct {
	*hub.Hub
	// Config is an admin client config.
	Config *rest.Config
	// Client is an admin clientset.
	Client kubernetes.Interface
	// DataDir is the hub's data dir (kept for restarts within the test).
	DataDir string

	t      testing.TB
	cancel context.CancelFunc
	done   chan error
	opts   Options
}

// Options adjust the hub under test.
type Options struct {
	// DataDir reuses a data dir (for restart tests); a temp dir by default.
	DataDir string
	// Loops run inside the hub against its API (controllers, scheduler ...).
	Loops []hub.Loop
	// AllowTagImages admits tag-only image references.
	AllowTagImages bool
	// Images admits tags for the repositories it names.
	Images image.Policy
	// Listen is the API's address; a free loopback port when empty.
	Listen string
	// Store and Etcd choose the store (bbolt in DataDir by default); see
	// hub/store/etcdstore/etcdtest for an etcd to use.
	Store string
	Etcd  hub.EtcdConfig
	// Log receives the hub's logs; discarded unless FLOTILLA_TEST_LOG is set.
	Log *slog.Logger
	// Limits of the API (defaults when zero).
	Limits apiserver.Limits
	// EventTTL and MaxEventBytesPerObject: see hub.Config.
	EventTTL               time.Duration
	MaxEventBytesPerObject int
	// RestrictDefaultNamespace leaves the namespace default under the
	// hub's pod policy (baseline). Otherwise hubtest labels it
	// pod-security.kubernetes.io/enforce=privileged, as a fleet whose
	// default namespace runs host-network and hostPath pods would: the
	// agent's tests run such pods there.
	RestrictDefaultNamespace bool
	// Profiling serves /debug/pprof/ (hub.Config.Profiling).
	Profiling bool
}

// Start runs a hub until the test ends.
func Start(t testing.TB, opts ...Options) *Hub {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.DataDir == "" {
		o.DataDir = t.TempDir()
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.Log == nil {
		if os.Getenv("FLOTILLA_TEST_LOG") != "" {
			o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		} else {
			o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
		}
	}
	h, err := hub.New(hub.Config{
		DataDir: o.DataDir, Listen: o.Listen, RunLoops: len(o.Loops) > 0, Loops: o.Loops,
		AllowTagImages: o.AllowTagImages, Images: o.Images, Log: o.Log, Store: o.Store, Etcd: o.Etcd,
		Limits: o.Limits, EventTTL: o.EventTTL, MaxEventBytesPerObject: o.MaxEventBytesPerObject,
		Profiling: o.Profiling,
	})
	if err != nil {
		t.Fatalf("starting a hub: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	th := &Hub{Hub: h, Config: h.AdminConfig(), DataDir: o.DataDir, t: t, cancel: cancel, done: make(chan error, 1), opts: o}
	go func() { th.done <- h.Run(ctx) }()
	th.Client = kubernetes.NewForConfigOrDie(th.Config)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := th.Client.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{})
		if err == nil && !o.RestrictDefaultNamespace {
			_, err = th.Client.CoreV1().Namespaces().Patch(context.Background(), "default", types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"`+validation.LabelPodSecurityEnforce+`":"`+validation.PodSecurityPrivileged+`"}}}`), metav1.PatchOptions{})
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the hub did not become ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(th.Stop)
	return th
}

// Stop stops the hub (idempotent) and waits for it to finish.
func (h *Hub) Stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			h.t.Errorf("hub stopped with an error: %v", err)
		}
	case <-time.After(30 * time.Second):
		h.t.Errorf("hub did not stop within 30s")
	}
}

// Restart stops the hub and starts a new one on the same data dir and
// port, so that clients made for the old one (agents) reconnect to it.
// A hub already stopped (to play an outage) is started again.
func (h *Hub) Restart() *Hub {
	h.Stop()
	o := h.opts
	o.DataDir = h.DataDir
	o.Listen = strings.TrimPrefix(h.Config.Host, "https://")
	return Start(h.t, o)
}

// NodeClient is a client with the node certificate of device node, as its
// agent has: the hub's node authorizer and restrictions apply to it.
func (h *Hub) NodeClient(node string) kubernetes.Interface {
	h.t.Helper()
	return kubernetes.NewForConfigOrDie(h.NodeConfig(node))
}

// NodeConfig is the client configuration of device node's agent.
func (h *Hub) NodeConfig(node string) *rest.Config {
	h.t.Helper()
	cert, key, err := h.PKI().IssueClientCert(agentapi.NodeUser(node), []string{agentapi.NodesGroup}, time.Hour)
	if err != nil {
		h.t.Fatalf("a node certificate for %s: %v", node, err)
	}
	return &rest.Config{Host: h.URL(),
		TLSClientConfig: rest.TLSClientConfig{CAData: h.PKI().CACertPEM(), CertData: cert, KeyData: key}, QPS: 1000, Burst: 1000}
}

// PeerDataDir returns a new data dir holding a copy of h's pki/, as the
// docs tell operators to give a second hub of a fleet (one CA, one
// Secrets key).
func (h *Hub) PeerDataDir() string {
	h.t.Helper()
	dir := h.t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "pki"), os.DirFS(filepath.Join(h.DataDir, "pki"))); err != nil {
		h.t.Fatalf("copying the hub's pki: %v", err)
	}
	return dir
}
