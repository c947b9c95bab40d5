package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	corev1 "k8s.io/api/core/v1"

	"flotilla.dev/flotilla/agent/kubelet"
	"flotilla.dev/flotilla/agent/localstore"
	"flotilla.dev/flotilla/agent/runtime"
	"flotilla.dev/flotilla/agent/static"
	"flotilla.dev/flotilla/api/podutil"
)

// LocalSocket, in the data dir, is where a running agent tells a
// technician on the device what it runs (`flotilla-agent pods`). The hub
// may be away and the local store is locked by the running agent, so the
// agent itself is the one that can answer. Only root may connect.
const LocalSocket = "agent.sock"

// LocalPodsPath is the local API's one endpoint.
const LocalPodsPath = "/pods"

// serveLocal answers on the data dir's socket until ctx ends.
func (a *Agent) serveLocal(ctx context.Context, k *kubelet.Kubelet) error {
	path := filepath.Join(a.cfg.DataDir, LocalSocket)
	// A socket left by an agent that died is in the way; a live agent
	// would hold state.db, which this one already opened.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("local API: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("local API: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return fmt.Errorf("local API: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+LocalPodsPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(k.LocalPods())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("local API: %w", err)
	}
	os.Remove(path)
	return nil
}

// LocalPods asks the agent running with dataDir what it runs; the error
// wraps ErrNotRunning when no agent answers there.
func LocalPods(ctx context.Context, dataDir string) ([]kubelet.LocalPod, error) {
	path := filepath.Join(dataDir, LocalSocket)
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}, Timeout: 5 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent"+LocalPodsPath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNotRunning, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the agent at %s answered %s", path, resp.Status)
	}
	var out []kubelet.LocalPod
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("the agent at %s: %w", path, err)
	}
	return out, nil
}

// ErrNotRunning says no agent answers on the data dir's socket.
var ErrNotRunning = errors.New("no agent is running with this data dir")

// DeviceView says where a device's pods can be read from.
type DeviceView struct {
	DataDir, ManifestsDir, NodeName        string
	ContainerdAddress, ContainerdNamespace string
	// LoggerPath is the runtime's (tests); found beside the agent when empty.
	LoggerPath string
}

// DeviceReport is what a device runs, as `flotilla-agent pods` shows it.
type DeviceReport struct {
	Pods []kubelet.LocalPod `json:"pods"`
	// Live: a running agent answered. Otherwise the report was read from
	// what a stopped agent left, and Problems says what could not be read.
	Live     bool     `json:"live"`
	Problems []string `json:"problems,omitempty"`
}

// DevicePods asks the running agent, or reads what a stopped one left.
func DevicePods(ctx context.Context, c DeviceView) (DeviceReport, error) {
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	pods, err := LocalPods(actx, c.DataDir)
	cancel()
	if err == nil {
		return DeviceReport{Pods: pods, Live: true}, nil
	}
	if !errors.Is(err, ErrNotRunning) {
		return DeviceReport{}, err
	}
	return storedPods(ctx, c)
}

// storedPods is the device's pods as a stopped agent left them: the
// hub's last word from the local store, the static manifests, and what
// containerd still runs.
func storedPods(ctx context.Context, c DeviceView) (DeviceReport, error) {
	byUID := map[string]*kubelet.LocalPod{}
	var problems []error
	add := func(p *corev1.Pod, source string) {
		byUID[string(p.UID)] = &kubelet.LocalPod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Source: source}
	}
	store, err := localstore.OpenReadOnly(filepath.Join(c.DataDir, stateFile), localstore.Options{})
	switch {
	case err == nil:
		cached, err := localstore.List[corev1.Pod](store, localstore.Pods)
		store.Close()
		if err != nil {
			problems = append(problems, err)
		}
		for _, p := range cached {
			// Mirror pods are kept for the hub source to resume with;
			// their static pods are listed below.
			if !podutil.IsMirror(p) {
				add(p, "cache")
			}
		}
	case errors.Is(err, localstore.ErrLocked):
		return DeviceReport{}, fmt.Errorf("an agent holds %s but does not answer on %s: it may be starting; try again", filepath.Join(c.DataDir, stateFile), filepath.Join(c.DataDir, LocalSocket))
	default:
		problems = append(problems, fmt.Errorf("no cached pods: %w", err))
	}
	if src, err := static.New(static.Config{Dir: c.ManifestsDir, NodeName: c.NodeName, Log: slog.New(slog.DiscardHandler)}); err == nil {
		src.Load()
		for _, p := range src.List() {
			add(p, "static")
		}
		for file, err := range src.Errors() {
			problems = append(problems, fmt.Errorf("static pod %s: %w", file, err))
		}
	} else {
		problems = append(problems, err)
	}
	if err := addContainers(ctx, c, byUID); err != nil {
		problems = append(problems, err)
	}
	out := make([]kubelet.LocalPod, 0, len(byUID))
	for _, p := range byUID {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name })
	rep := DeviceReport{Pods: out}
	for _, p := range problems {
		rep.Problems = append(rep.Problems, p.Error())
	}
	return rep, nil
}

// addContainers fills in phase and restarts from containerd, and adds
// the pods that run although no source names them.
func addContainers(ctx context.Context, c DeviceView, byUID map[string]*kubelet.LocalPod) error {
	client, err := containerd.New(c.ContainerdAddress, containerd.WithTimeout(3*time.Second))
	if err != nil {
		return fmt.Errorf("containerd at %s: %w", c.ContainerdAddress, err)
	}
	defer client.Close()
	rt, err := runtime.New(runtime.Config{Client: client, Namespace: c.ContainerdNamespace, LoggerPath: c.LoggerPath})
	if err != nil {
		return err
	}
	cs, err := rt.ListContainers(ctx, runtime.ListFilter{})
	if err != nil {
		return fmt.Errorf("containerd at %s: %w", c.ContainerdAddress, err)
	}
	attempts := map[string]uint32{}
	for _, ctr := range cs {
		p, ok := byUID[ctr.Pod.UID]
		if !ok {
			p = &kubelet.LocalPod{Namespace: ctr.Pod.Namespace, Name: ctr.Pod.Name, UID: ctr.Pod.UID}
			byUID[ctr.Pod.UID] = p
		}
		key := ctr.Pod.UID + "/" + ctr.Name
		if ctr.Attempt > attempts[key] {
			p.Restarts += int32(ctr.Attempt - attempts[key])
			attempts[key] = ctr.Attempt
		}
		if ctr.Status.State == runtime.StateRunning {
			p.Phase = corev1.PodRunning
		} else if p.Phase == "" && ctr.Status.State == runtime.StateExited && ctr.Status.ExitCode != 0 {
			p.LastError = fmt.Sprintf("%s exited with code %d", ctr.Name, ctr.Status.ExitCode)
		}
	}
	for _, p := range byUID {
		if p.Phase == "" {
			p.Phase = corev1.PodPending
		}
	}
	return nil
}
