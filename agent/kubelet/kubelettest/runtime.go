package kubelettest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"flotilla.dev/flotilla/agent/kubelet"
	"flotilla.dev/flotilla/agent/runtime"
	"flotilla.dev/flotilla/registry"
)

var _ kubelet.Runtime = (*Runtime)(nil)

// ReadyDir is the directory of sandboxes the fake makes: their network,
// IPC and UTS namespace paths are the test process's own, which
// runtime.Sandbox.Ready accepts without root.
const ReadyDir = "/proc/self/ns"

// notReadyDir stands for the namespaces of a sandbox that lost them (a
// reboot, an interrupted creation).
const notReadyDir = "/nonexistent/kubelettest-sandbox"

// DefaultImageConfig is what ImageConfig returns for an image with no
// config of its own (see SetImageConfig).
var DefaultImageConfig = ocispec.ImageConfig{Entrypoint: []string{"/app"}, Env: []string{"PATH=/usr/bin:/bin"}}

// DefaultStopExitCode is the exit code of a container StopContainer
// ends: 128+SIGTERM, as for a process that does not handle the signal.
const DefaultStopExitCode = 143

// Record is one change the fake runtime made, in History.
type Record struct {
	// Op is the method ("CreateSandbox", "RemoveSandbox",
	// "CreateContainer", "StartContainer", "StopContainer",
	// "RemoveContainer") or test control ("Exit", "Kill", "OOMKill")
	// that made the change.
	Op      string
	PodUID  string
	Name    string // container name ("" for a sandbox)
	Attempt uint32
	ID      string // container or sandbox ID
	// Grace is what StopContainer was given.
	Grace time.Duration
	// ExitCode is the code of an exit (StopContainer of a running
	// container, Exit, Kill, OOMKill).
	ExitCode int32
	At       time.Time
}

// Runtime is an in-memory kubelet.Runtime.
type Runtime struct {
	faults

	mu           sync.Mutex
	sandboxes    map[string]*runtime.Sandbox
	containers   map[string]*runtime.Container
	configs      map[string]runtime.ContainerConfig
	imageConfigs map[string]ocispec.ImageConfig
	images       interface{ Has(string) bool }
	exec         func(c runtime.Container, argv []string) (runtime.ExecResult, error)
	onStart      func(c runtime.Container)
	stopCode     int32
	history      []Record
	starts       map[string]int // pod UID/name -> successful starts
	watchers     map[*watcher]bool
	removedLogs  []runtime.PodRef
}

// NewRuntime returns an empty fake runtime.
func NewRuntime() *Runtime {
	return &Runtime{
		sandboxes:    map[string]*runtime.Sandbox{},
		containers:   map[string]*runtime.Container{},
		configs:      map[string]runtime.ContainerConfig{},
		imageConfigs: map[string]ocispec.ImageConfig{},
		stopCode:     DefaultStopExitCode,
		starts:       map[string]int{},
		watchers:     map[*watcher]bool{},
	}
}

// ---- kubelet.Runtime ----

// CreateSandbox makes a ready sandbox with ID pod UID, or returns the
// ready one the pod has; a sandbox that is not ready is replaced.
func (r *Runtime) CreateSandbox(_ context.Context, cfg runtime.SandboxConfig) (*runtime.Sandbox, error) {
	if err := r.enter("CreateSandbox"); err != nil {
		return nil, err
	}
	id := cfg.Pod.UID
	if id == "" {
		return nil, fmt.Errorf("%w: a sandbox needs the pod's UID", runtime.ErrInvalid)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if sb, ok := r.sandboxes[id]; ok && sb.Ready() {
		return cloneSandbox(sb), nil
	}
	sb := &runtime.Sandbox{
		ID: id, Pod: cfg.Pod, Hostname: cfg.Hostname, HostNetwork: cfg.HostNetwork,
		Labels: maps.Clone(cfg.Labels), CreatedAt: time.Now().UTC(), Dir: ReadyDir,
	}
	r.sandboxes[id] = sb
	r.record(Record{Op: "CreateSandbox", PodUID: id, ID: id})
	return cloneSandbox(sb), nil
}

// GetSandbox returns the sandbox; an error wrapping runtime.ErrNotFound
// when there is none.
func (r *Runtime) GetSandbox(_ context.Context, id string) (*runtime.Sandbox, error) {
	if err := r.enter("GetSandbox"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.sandboxes[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %s: %w", id, runtime.ErrNotFound)
	}
	return cloneSandbox(sb), nil
}

// ListSandboxes returns every sandbox, sorted by ID.
func (r *Runtime) ListSandboxes(context.Context) ([]*runtime.Sandbox, error) {
	if err := r.enter("ListSandboxes"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*runtime.Sandbox, 0, len(r.sandboxes))
	for _, sb := range r.sandboxes {
		out = append(out, cloneSandbox(sb))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// SetSandboxIP records the pod IP.
func (r *Runtime) SetSandboxIP(_ context.Context, id, ip string) error {
	if err := r.enter("SetSandboxIP"); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.sandboxes[id]
	if !ok {
		return fmt.Errorf("sandbox %s: %w", id, runtime.ErrNotFound)
	}
	sb.IP = ip
	return nil
}

// RemoveSandbox removes the sandbox; removing one that does not exist is
// not an error. Its containers stay, as with the real runtime.
func (r *Runtime) RemoveSandbox(_ context.Context, id string) error {
	if err := r.enter("RemoveSandbox"); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.sandboxes[id]; ok {
		delete(r.sandboxes, id)
		r.record(Record{Op: "RemoveSandbox", PodUID: id, ID: id})
	}
	return nil
}

// ImageConfig returns the image's config (SetImageConfig), or
// DefaultImageConfig. With UseImages, an image that is not present gives
// an error wrapping runtime.ErrImageNotPresent.
func (r *Runtime) ImageConfig(_ context.Context, image string) (ocispec.ImageConfig, error) {
	if err := r.enter("ImageConfig"); err != nil {
		return ocispec.ImageConfig{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.images != nil && !r.images.Has(image) {
		return ocispec.ImageConfig{}, fmt.Errorf("%w: %s", runtime.ErrImageNotPresent, image)
	}
	cfg, ok := r.imageConfigs[imageKey(image)]
	if !ok {
		cfg = DefaultImageConfig
	}
	return cloneImageConfig(cfg), nil
}

// CreateContainer records a Created container with the runtime's labels
// (pod UID, namespace and name, container name, attempt) over cfg's.
func (r *Runtime) CreateContainer(_ context.Context, cfg runtime.ContainerConfig) (*runtime.Container, error) {
	if err := r.enter("CreateContainer"); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.images != nil && !r.images.Has(cfg.Image) {
		return nil, fmt.Errorf("%w: %s (container %s of pod %s)", runtime.ErrImageNotPresent, cfg.Image, cfg.Name, cfg.Pod)
	}
	id := runtime.ContainerID(cfg.Pod.UID, cfg.Name, cfg.Attempt)
	if _, ok := r.containers[id]; ok {
		return nil, fmt.Errorf("container %s (%s attempt %d of pod %s): %w", id, cfg.Name, cfg.Attempt, cfg.Pod, runtime.ErrAlreadyExists)
	}
	stop := cfg.StopSignal
	if stop == "" {
		stop = r.imageConfigLocked(cfg.Image).StopSignal
	}
	if stop == "" {
		stop = "SIGTERM"
	}
	c := &runtime.Container{
		ID: id, Pod: cfg.Pod, Name: cfg.Name, Attempt: cfg.Attempt, Image: cfg.Image,
		LogPath:    "/var/log/kubelettest/" + cfg.Pod.Namespace + "_" + cfg.Pod.Name + "_" + cfg.Pod.UID + "/" + cfg.Name + "/" + strconv.FormatUint(uint64(cfg.Attempt), 10) + ".log",
		StopSignal: stop, CreatedAt: time.Now().UTC(),
		Labels: withRuntimeLabels(cfg.Labels, cfg.Pod, cfg.Name, cfg.Attempt),
		Status: runtime.Status{State: runtime.StateCreated},
	}
	r.containers[id] = c
	stored := cfg
	stored.Sandbox = cloneSandbox(cfg.Sandbox)
	r.configs[id] = stored
	r.record(Record{Op: "CreateContainer", PodUID: c.Pod.UID, Name: c.Name, Attempt: c.Attempt, ID: id})
	return cloneContainer(c), nil
}

// StartContainer makes a Created container Running and tells watchers;
// then it calls the OnStart hook, if any.
func (r *Runtime) StartContainer(_ context.Context, id string) error {
	if err := r.enter("StartContainer"); err != nil {
		return err
	}
	r.mu.Lock()
	c, ok := r.containers[id]
	if !ok {
		r.mu.Unlock()
		return fmt.Errorf("container %s: %w", id, runtime.ErrNotFound)
	}
	if c.Status.State != runtime.StateCreated {
		r.mu.Unlock()
		return fmt.Errorf("start container %s: %w: it is %s", id, runtime.ErrAlreadyExists, c.Status.State)
	}
	now := time.Now().UTC()
	c.Status = runtime.Status{State: runtime.StateRunning, Pid: uint32(1000 + len(r.history)), StartedAt: now}
	r.starts[c.Pod.UID+"/"+c.Name]++
	r.record(Record{Op: "StartContainer", PodUID: c.Pod.UID, Name: c.Name, Attempt: c.Attempt, ID: id})
	r.emitLocked(runtime.Event{Type: runtime.EventStart, ContainerID: id, Time: now})
	hook, snapshot := r.onStart, *cloneContainer(c)
	r.mu.Unlock()
	if hook != nil {
		hook(snapshot)
	}
	return nil
}

// StopContainer ends a running container at once with the stop exit
// code (DefaultStopExitCode unless SetStopExitCode), records grace, and
// returns the final status. Stopping a container that is not running
// returns its status.
func (r *Runtime) StopContainer(_ context.Context, id string, grace time.Duration) (runtime.Status, error) {
	if err := r.enter("StopContainer"); err != nil {
		return runtime.Status{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return runtime.Status{}, fmt.Errorf("container %s: %w", id, runtime.ErrNotFound)
	}
	rec := Record{Op: "StopContainer", PodUID: c.Pod.UID, Name: c.Name, Attempt: c.Attempt, ID: id, Grace: grace}
	if c.Status.State == runtime.StateRunning {
		r.exitLocked(c, r.stopCode, false)
		rec.ExitCode = r.stopCode
	}
	r.record(rec)
	return c.Status, nil
}

// RemoveContainer removes the container, running or not; removing one
// that does not exist is not an error.
func (r *Runtime) RemoveContainer(_ context.Context, id string) error {
	if err := r.enter("RemoveContainer"); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.containers[id]; ok {
		delete(r.containers, id)
		delete(r.configs, id)
		r.record(Record{Op: "RemoveContainer", PodUID: c.Pod.UID, Name: c.Name, Attempt: c.Attempt, ID: id})
	}
	return nil
}

// ContainerStatus returns the container; an error wrapping
// runtime.ErrNotFound when there is none.
func (r *Runtime) ContainerStatus(_ context.Context, id string) (*runtime.Container, error) {
	if err := r.enter("ContainerStatus"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return nil, fmt.Errorf("container %s: %w", id, runtime.ErrNotFound)
	}
	return cloneContainer(c), nil
}

// ListContainers returns the containers f selects, sorted by pod UID,
// name and attempt.
func (r *Runtime) ListContainers(_ context.Context, f runtime.ListFilter) ([]*runtime.Container, error) {
	if err := r.enter("ListContainers"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.listLocked(f.PodUID), nil
}

// RemovePodLogs records that the pod's logs were removed.
func (r *Runtime) RemovePodLogs(pod runtime.PodRef) error {
	if err := r.enter("RemovePodLogs"); err != nil {
		return err
	}
	r.mu.Lock()
	r.removedLogs = append(r.removedLogs, pod)
	r.mu.Unlock()
	return nil
}

// Watch calls fn, in order, for every container start, exit and OOM kill
// from its call until ctx ends.
func (r *Runtime) Watch(ctx context.Context, fn func(runtime.Event)) error {
	if err := r.enter("Watch"); err != nil {
		return err
	}
	w := &watcher{wake: make(chan struct{}, 1)}
	r.mu.Lock()
	r.watchers[w] = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.watchers, w)
		r.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.wake:
		}
		for _, ev := range w.take() {
			if ctx.Err() != nil {
				return nil
			}
			if fn != nil {
				fn(ev)
			}
		}
	}
}

// Exec runs the exec function (SetExec) for a running container;
// without one every command succeeds with no output. A container that
// does not exist or is not running gives an error wrapping
// runtime.ErrNotFound.
func (r *Runtime) Exec(_ context.Context, id string, argv []string, _ time.Duration) (runtime.ExecResult, error) {
	if err := r.enter("Exec"); err != nil {
		return runtime.ExecResult{}, err
	}
	if len(argv) == 0 {
		return runtime.ExecResult{}, fmt.Errorf("%w: exec in %s: empty command", runtime.ErrInvalid, id)
	}
	r.mu.Lock()
	c, ok := r.containers[id]
	if !ok {
		r.mu.Unlock()
		return runtime.ExecResult{}, fmt.Errorf("container %s: %w", id, runtime.ErrNotFound)
	}
	if c.Status.State != runtime.StateRunning {
		r.mu.Unlock()
		return runtime.ExecResult{}, fmt.Errorf("exec in container %s: not running: %w", id, runtime.ErrNotFound)
	}
	fn, snapshot := r.exec, *cloneContainer(c)
	r.mu.Unlock()
	if fn == nil {
		return runtime.ExecResult{}, nil
	}
	return fn(snapshot, slices.Clone(argv))
}

// ---- test controls ----

// Exit ends a running container's process with code, as if it exited on
// its own, and tells watchers.
func (r *Runtime) Exit(id string, code int32) error {
	return r.end(id, "Exit", code, false)
}

// Kill ends a running container with SIGKILL (exit code 137).
func (r *Runtime) Kill(id string) error {
	return r.end(id, "Kill", 137, false)
}

// OOMKill ends a running container as the kernel's OOM killer does: an
// OOM event, then its exit with code 137 and reason OOMKilled.
func (r *Runtime) OOMKill(id string) error {
	return r.end(id, "OOMKill", 137, true)
}

func (r *Runtime) end(id, op string, code int32, oom bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return fmt.Errorf("container %s: %w", id, runtime.ErrNotFound)
	}
	if c.Status.State != runtime.StateRunning {
		return fmt.Errorf("container %s is %s, not running", id, c.Status.State)
	}
	r.exitLocked(c, code, oom)
	r.record(Record{Op: op, PodUID: c.Pod.UID, Name: c.Name, Attempt: c.Attempt, ID: id, ExitCode: code})
	return nil
}

// exitLocked moves c to Exited and tells watchers.
func (r *Runtime) exitLocked(c *runtime.Container, code int32, oom bool) {
	now := time.Now().UTC()
	st := runtime.Status{State: runtime.StateExited, ExitCode: code, OOMKilled: oom, StartedAt: c.Status.StartedAt, FinishedAt: now}
	switch {
	case oom:
		st.Reason = "OOMKilled"
	case code == 0:
		st.Reason = "Completed"
	default:
		st.Reason = "Error"
	}
	c.Status = st
	if oom {
		r.emitLocked(runtime.Event{Type: runtime.EventOOM, ContainerID: c.ID, Time: now})
	}
	r.emitLocked(runtime.Event{Type: runtime.EventExit, ContainerID: c.ID, ExitCode: uint32(code), Time: now})
}

// Emit delivers ev to the watchers, as the runtime does for containerd's
// events (the kubelet reads the status, not the event's content).
func (r *Runtime) Emit(ev runtime.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	r.emitLocked(ev)
}

func (r *Runtime) emitLocked(ev runtime.Event) {
	for w := range r.watchers {
		w.push(ev)
	}
}

// Watchers is how many Watch calls are receiving events.
func (r *Runtime) Watchers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.watchers)
}

// AddSandbox puts a ready sandbox in the runtime, as one left by an
// earlier agent (History does not show it).
func (r *Runtime) AddSandbox(pod runtime.PodRef, ip string) *runtime.Sandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb := &runtime.Sandbox{ID: pod.UID, Pod: pod, Hostname: pod.Name, IP: ip, CreatedAt: time.Now().UTC(), Dir: ReadyDir}
	r.sandboxes[pod.UID] = sb
	return cloneSandbox(sb)
}

// SetSandboxReady makes a sandbox's namespaces exist (true) or be lost
// (false, as after a reboot), for runtime.Sandbox.Ready.
func (r *Runtime) SetSandboxReady(id string, ready bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.sandboxes[id]
	if !ok {
		return fmt.Errorf("sandbox %s: %w", id, runtime.ErrNotFound)
	}
	sb.Dir = ReadyDir
	if !ready {
		sb.Dir = notReadyDir
	}
	return nil
}

// AddContainer puts a container in the runtime, as one left by an
// earlier agent (History does not show it). The ID is computed from the
// pod, name and attempt when empty; the runtime's labels are added; a
// zero State is Running (started now).
func (r *Runtime) AddContainer(c runtime.Container) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.ID == "" {
		c.ID = runtime.ContainerID(c.Pod.UID, c.Name, c.Attempt)
	}
	now := time.Now().UTC()
	if c.Status.State == "" {
		c.Status = runtime.Status{State: runtime.StateRunning, Pid: 999, StartedAt: now}
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = now
	}
	if c.StopSignal == "" {
		c.StopSignal = "SIGTERM"
	}
	c.Labels = withRuntimeLabels(c.Labels, c.Pod, c.Name, c.Attempt)
	r.containers[c.ID] = cloneContainer(&c)
	return c.ID
}

// SetImageConfig sets the config ImageConfig returns for image (a
// reference, normalised as the registry does).
func (r *Runtime) SetImageConfig(image string, cfg ocispec.ImageConfig) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.imageConfigs[imageKey(image)] = cloneImageConfig(cfg)
}

// UseImages makes ImageConfig and CreateContainer fail, as the real
// runtime does, for an image images does not have (an *Images fits).
func (r *Runtime) UseImages(images interface{ Has(image string) bool }) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.images = images
}

// SetExec sets what Exec answers (probes, hooks); nil makes every
// command succeed.
func (r *Runtime) SetExec(fn func(c runtime.Container, argv []string) (runtime.ExecResult, error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.exec = fn
}

// OnStart sets a hook called after every successful StartContainer,
// before it returns, with the started container; it may call Exit to
// make a container that ends at once. nil removes it.
func (r *Runtime) OnStart(fn func(c runtime.Container)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onStart = fn
}

// SetStopExitCode sets the exit code of containers StopContainer ends.
func (r *Runtime) SetStopExitCode(code int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopCode = code
}

// Sandbox returns the pod's sandbox, if it has one.
func (r *Runtime) Sandbox(podUID string) (*runtime.Sandbox, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.sandboxes[podUID]
	if !ok {
		return nil, false
	}
	return cloneSandbox(sb), true
}

// Containers returns the pod's containers (every pod's when podUID is
// ""), sorted like ListContainers.
func (r *Runtime) Containers(podUID string) []*runtime.Container {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.listLocked(podUID)
}

// Latest returns the highest attempt of a pod's container that exists.
func (r *Runtime) Latest(podUID, name string) (*runtime.Container, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out *runtime.Container
	for _, c := range r.containers {
		if c.Pod.UID == podUID && c.Name == name && (out == nil || c.Attempt > out.Attempt) {
			out = c
		}
	}
	if out == nil {
		return nil, false
	}
	return cloneContainer(out), true
}

// Running returns the names of the pod's running containers, sorted.
func (r *Runtime) Running(podUID string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.containers {
		if c.Pod.UID == podUID && c.Status.State == runtime.StateRunning {
			out = append(out, c.Name)
		}
	}
	sort.Strings(out)
	return out
}

// Restarts is how many times a pod's container was started again after
// its first start (successful StartContainer calls less one; removed
// attempts count).
func (r *Runtime) Restarts(podUID, name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return max(r.starts[podUID+"/"+name]-1, 0)
}

// Config returns the configuration a container was created with.
func (r *Runtime) Config(id string) (runtime.ContainerConfig, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg, ok := r.configs[id]
	return cfg, ok
}

// History returns the changes made so far, oldest first.
func (r *Runtime) History() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.history)
}

// Ops returns the History records of one pod with Op in ops (every op
// when none is given), oldest first.
func (r *Runtime) Ops(podUID string, ops ...string) []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Record
	for _, rec := range r.history {
		if rec.PodUID == podUID && (len(ops) == 0 || slices.Contains(ops, rec.Op)) {
			out = append(out, rec)
		}
	}
	return out
}

// StopGraces returns the grace periods StopContainer was given for a
// container, in order.
func (r *Runtime) StopGraces(id string) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Duration
	for _, rec := range r.history {
		if rec.Op == "StopContainer" && rec.ID == id {
			out = append(out, rec.Grace)
		}
	}
	return out
}

// RemovedLogs returns the pods whose logs RemovePodLogs removed.
func (r *Runtime) RemovedLogs() []runtime.PodRef {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.removedLogs)
}

// ---- internals ----

func (r *Runtime) record(rec Record) {
	rec.At = time.Now()
	r.history = append(r.history, rec)
}

func (r *Runtime) listLocked(podUID string) []*runtime.Container {
	var out []*runtime.Container
	for _, c := range r.containers {
		if podUID == "" || c.Pod.UID == podUID {
			out = append(out, cloneContainer(c))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Pod.UID != b.Pod.UID {
			return a.Pod.UID < b.Pod.UID
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Attempt < b.Attempt
	})
	return out
}

func (r *Runtime) imageConfigLocked(image string) ocispec.ImageConfig {
	if cfg, ok := r.imageConfigs[imageKey(image)]; ok {
		return cfg
	}
	return DefaultImageConfig
}

func withRuntimeLabels(in map[string]string, pod runtime.PodRef, name string, attempt uint32) map[string]string {
	out := maps.Clone(in)
	if out == nil {
		out = map[string]string{}
	}
	out[runtime.LabelPodUID] = pod.UID
	out[runtime.LabelPodNamespace] = pod.Namespace
	out[runtime.LabelPodName] = pod.Name
	out[runtime.LabelContainerName] = name
	out[runtime.LabelAttempt] = strconv.FormatUint(uint64(attempt), 10)
	return out
}

// imageKey normalises an image reference as the registry does, so that
// "app:1" and "docker.io/library/app:1" are the same image.
func imageKey(image string) string {
	if ref, err := registry.ParseReference(image); err == nil {
		return ref.PullName()
	}
	return image
}

func cloneSandbox(sb *runtime.Sandbox) *runtime.Sandbox {
	if sb == nil {
		return nil
	}
	out := *sb
	out.Labels = maps.Clone(sb.Labels)
	return &out
}

func cloneContainer(c *runtime.Container) *runtime.Container {
	out := *c
	out.Labels = maps.Clone(c.Labels)
	return &out
}

func cloneImageConfig(c ocispec.ImageConfig) ocispec.ImageConfig {
	c.Entrypoint = slices.Clone(c.Entrypoint)
	c.Cmd = slices.Clone(c.Cmd)
	c.Env = slices.Clone(c.Env)
	c.ExposedPorts = maps.Clone(c.ExposedPorts)
	c.Volumes = maps.Clone(c.Volumes)
	c.Labels = maps.Clone(c.Labels)
	return c
}

// watcher queues events for one Watch call, without bound, so that the
// runtime never blocks on a slow subscriber.
type watcher struct {
	mu   sync.Mutex
	q    []runtime.Event
	wake chan struct{}
}

func (w *watcher) push(ev runtime.Event) {
	w.mu.Lock()
	w.q = append(w.q, ev)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watcher) take() []runtime.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.q
	w.q = nil
	return q
}

// faults counts calls by method and hands out injected errors; the fakes
// embed it.
type faults struct {
	fmu    sync.Mutex
	calls  map[string]int
	next   map[string][]error
	always map[string]error
}

// enter counts a call of op and returns the error injected for it.
func (f *faults) enter(op string) error {
	f.fmu.Lock()
	defer f.fmu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[op]++
	if q := f.next[op]; len(q) > 0 {
		f.next[op] = q[1:]
		return q[0]
	}
	return f.always[op]
}

// Calls is how many times the method named op was called (failed calls
// included).
func (f *faults) Calls(op string) int {
	f.fmu.Lock()
	defer f.fmu.Unlock()
	return f.calls[op]
}

// FailNext makes the next call of the method named op return err; errors
// queued for one method are returned in order, one per call.
func (f *faults) FailNext(op string, err error) {
	if err == nil {
		panic(errors.New("kubelettest: FailNext with a nil error"))
	}
	f.fmu.Lock()
	defer f.fmu.Unlock()
	if f.next == nil {
		f.next = map[string][]error{}
	}
	f.next[op] = append(f.next[op], err)
}

// FailAlways makes every call of the method named op return err (after
// any FailNext errors); nil makes calls succeed again.
func (f *faults) FailAlways(op string, err error) {
	f.fmu.Lock()
	defer f.fmu.Unlock()
	if f.always == nil {
		f.always = map[string]error{}
	}
	if err == nil {
		delete(f.always, op)
		return
	}
	f.always[op] = err
}
