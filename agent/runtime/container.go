package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	"github.com/moby/sys/signal"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"flotilla.dev/flotilla/agent/runtime/logdriver"
)

// State is a container's lifecycle state.
type State string

const (
	StateCreated State = "created"
	StateRunning State = "running"
	StateExited  State = "exited"
	// StateUnknown: the container was started but its task is gone without
	// an exit record (containerd lost it, or the machine rebooted).
	StateUnknown State = "unknown"
)

// Status is a container's state, as the pod status needs it.
type Status struct {
	State      State
	Pid        uint32
	ExitCode   int32
	OOMKilled  bool
	StartedAt  time.Time
	FinishedAt time.Time
	// Reason is Kubernetes' terminated reason: Completed, Error, OOMKilled
	// or ContainerStatusUnknown.
	Reason string
}

// Container is a container record with its status.
type Container struct {
	ID         string
	Pod        PodRef
	Name       string
	Attempt    uint32
	Image      string
	LogPath    string
	StopSignal string
	CreatedAt  time.Time
	Labels     map[string]string
	// Stdin, StdinOnce and TTY are how the process was started.
	Stdin, StdinOnce, TTY bool
	Status                Status
}

// ContainerID is the deterministic containerd ID of a pod's container
// attempt; containerd IDs are limited to 76 characters, so the pod UID is
// folded into a hash.
func ContainerID(podUID, name string, attempt uint32) string {
	sum := sha256.Sum256([]byte(podUID + "/" + name + "/" + strconv.FormatUint(uint64(attempt), 10)))
	n := name
	if len(n) > 40 {
		n = n[:40]
	}
	return n + "-" + hex.EncodeToString(sum[:])[:32]
}

// LogPath is where a container attempt's log goes, in the kubelet's layout.
func (r *Runtime) LogPath(pod PodRef, container string, attempt uint32) string {
	return filepath.Join(r.cfg.LogDir, pod.Namespace+"_"+pod.Name+"_"+pod.UID, container, strconv.FormatUint(uint64(attempt), 10)+".log")
}

// PodLogDir is the directory of all of a pod's logs.
func (r *Runtime) PodLogDir(pod PodRef) string {
	return filepath.Join(r.cfg.LogDir, pod.Namespace+"_"+pod.Name+"_"+pod.UID)
}

// ImageConfig returns a pulled image's config (entrypoint, cmd, env,
// working dir, user, stop signal), from which the kubelet computes argv.
func (r *Runtime) ImageConfig(ctx context.Context, image string) (ocispec.ImageConfig, error) {
	ctx = r.ctx(ctx)
	img, err := r.client.GetImage(ctx, image)
	if errdefs.IsNotFound(err) {
		return ocispec.ImageConfig{}, fmt.Errorf("%w: %s", ErrImageNotPresent, image)
	}
	if err != nil {
		return ocispec.ImageConfig{}, err
	}
	spec, err := img.Spec(ctx)
	if err != nil {
		return ocispec.ImageConfig{}, fmt.Errorf("read config of image %s: %w", image, err)
	}
	return spec.Config, nil
}

// CreateContainer creates (but does not start) a container.
func (r *Runtime) CreateContainer(ctx context.Context, cfg ContainerConfig) (*Container, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx = r.ctx(ctx)
	img, err := r.client.GetImage(ctx, cfg.Image)
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s (container %s of pod %s)", ErrImageNotPresent, cfg.Image, cfg.Name, cfg.Pod)
	}
	if err != nil {
		return nil, fmt.Errorf("look up image %s: %w", cfg.Image, err)
	}
	imgSpec, err := img.Spec(ctx)
	if err != nil {
		return nil, fmt.Errorf("read config of image %s: %w", cfg.Image, err)
	}
	stop := cfg.StopSignal
	if stop == "" {
		stop = imgSpec.Config.StopSignal
	}
	if stop == "" {
		stop = "SIGTERM"
	}
	if _, err := signal.ParseSignal(stop); err != nil {
		return nil, fmt.Errorf("%w: stop signal %q of container %s: %v", ErrInvalid, stop, cfg.Name, err)
	}

	id := ContainerID(cfg.Pod.UID, cfg.Name, cfg.Attempt)
	logPath := r.LogPath(cfg.Pod, cfg.Name, cfg.Attempt)
	labels := map[string]string{}
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	for k, v := range map[string]string{
		LabelPodUID:        cfg.Pod.UID,
		LabelPodNamespace:  cfg.Pod.Namespace,
		LabelPodName:       cfg.Pod.Name,
		LabelContainerName: cfg.Name,
		LabelAttempt:       strconv.FormatUint(uint64(cfg.Attempt), 10),
		labelImage:         cfg.Image,
		labelLogPath:       logPath,
		labelStopSignal:    stop,
	} {
		labels[k] = v
	}
	for k, on := range map[string]bool{labelStdin: cfg.Stdin, labelStdinOnce: cfg.Stdin && cfg.StdinOnce, labelTTY: cfg.TTY} {
		if on {
			labels[k] = "true"
		}
	}
	opts := append([]oci.SpecOpts{withImageConfig(imgSpec.Config)}, specOpts(cfg, "/"+r.cfg.Namespace+"/"+id)...)
	c, err := r.client.NewContainer(ctx, id,
		containerd.WithImage(img),
		containerd.WithSnapshotter(r.cfg.Snapshotter),
		containerd.WithNewSnapshot(id, img),
		containerd.WithRuntime(r.cfg.Runtime, nil),
		containerd.WithNewSpec(opts...),
		containerd.WithContainerLabels(labels),
	)
	if errdefs.IsAlreadyExists(err) {
		return nil, fmt.Errorf("container %s (%s attempt %d of pod %s): %w", id, cfg.Name, cfg.Attempt, cfg.Pod, ErrAlreadyExists)
	}
	if err != nil {
		// A failed create can leave the snapshot behind.
		r.client.SnapshotService(r.cfg.Snapshotter).Remove(ctx, id)
		return nil, fmt.Errorf("create container %s of pod %s: %w", cfg.Name, cfg.Pod, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	out := fromInfo(info)
	out.Status = Status{State: StateCreated}
	return out, nil
}

func fromInfo(info containers.Container) *Container {
	l := info.Labels
	attempt, _ := strconv.ParseUint(l[LabelAttempt], 10, 32)
	return &Container{
		ID:         info.ID,
		Pod:        PodRef{UID: l[LabelPodUID], Namespace: l[LabelPodNamespace], Name: l[LabelPodName]},
		Name:       l[LabelContainerName],
		Attempt:    uint32(attempt),
		Image:      l[labelImage],
		LogPath:    l[labelLogPath],
		StopSignal: l[labelStopSignal],
		CreatedAt:  info.CreatedAt,
		Labels:     l,
		Stdin:      l[labelStdin] == "true",
		StdinOnce:  l[labelStdinOnce] == "true",
		TTY:        l[labelTTY] == "true",
	}
}

func (r *Runtime) load(ctx context.Context, id string) (containerd.Container, containers.Container, error) {
	c, err := r.client.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil, containers.Container{}, fmt.Errorf("container %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, containers.Container{}, err
	}
	info, err := c.Info(ctx)
	if errdefs.IsNotFound(err) {
		return nil, containers.Container{}, fmt.Errorf("container %s: %w", id, ErrNotFound)
	}
	return c, info, err
}

// taskChangeTimeout bounds a change to a container's task (its create and
// start, its delete), which the caller's cancellation does not cut short:
// containerd 1.6 does not undo such a change cancelled halfway. A delete
// cancelled after the shim removed the container makes containerd forget
// the task without telling the shim to exit, and the shim runs on, tracked
// by nothing, until the device reboots (TestCancelledExitRecordLeavesNoShim).
// A create and start are given the same, so that a start either happened
// or did not. A kubelet cancels whatever it is doing when the agent stops.
const taskChangeTimeout = time.Minute

// uncancelled is ctx's values without its cancellation, for a change to a
// task (see taskChangeTimeout).
func uncancelled(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), taskChangeTimeout)
}

// StartContainer starts a created container's process, logging to its
// log file. A container whose process cannot start (a command missing in
// the image, say) is left without a task, with the error returned. Once
// its task is being created the start is not cancelled with ctx (see
// taskChangeTimeout).
func (r *Runtime) StartContainer(ctx context.Context, id string) error {
	ctx = r.ctx(ctx)
	c, info, err := r.load(ctx, id)
	if err != nil {
		return err
	}
	if _, err := c.Task(ctx, nil); err == nil {
		return fmt.Errorf("start container %s: %w: it already has a task", id, ErrAlreadyExists)
	}
	logPath := info.Labels[labelLogPath]
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	ctx, cancel := uncancelled(ctx)
	defer cancel()
	if interactive(info.Labels) {
		return r.startInteractive(ctx, c, info)
	}
	args := map[string]string{logdriver.ArgPath: logPath}
	if r.cfg.LogMaxSize > 0 {
		args[logdriver.ArgMaxSize] = strconv.FormatInt(r.cfg.LogMaxSize, 10)
	}
	if r.cfg.LogMaxFiles > 0 {
		args[logdriver.ArgMaxFiles] = strconv.Itoa(r.cfg.LogMaxFiles)
	}
	task, err := c.NewTask(ctx, cio.BinaryIO(r.cfg.LoggerPath, args))
	if err != nil {
		return fmt.Errorf("start container %s (%s of pod %s/%s): %w", id, info.Labels[LabelContainerName], info.Labels[LabelPodNamespace], info.Labels[LabelPodName], err)
	}
	if err := task.Start(ctx); err != nil {
		task.Delete(ctx, containerd.WithProcessKill)
		return fmt.Errorf("start container %s (%s of pod %s/%s): %w", id, info.Labels[LabelContainerName], info.Labels[LabelPodNamespace], info.Labels[LabelPodName], err)
	}
	if _, err := c.SetLabels(ctx, map[string]string{labelStartedAt: time.Now().UTC().Format(time.RFC3339Nano)}); err != nil {
		return fmt.Errorf("record start of container %s: %w", id, err)
	}
	return nil
}

// StopContainer sends the container's stop signal, then SIGKILL when
// grace runs out, and returns the final status. Stopping a container that
// is not running returns its status.
func (r *Runtime) StopContainer(ctx context.Context, id string, grace time.Duration) (Status, error) {
	ctx = r.ctx(ctx)
	c, info, err := r.load(ctx, id)
	if err != nil {
		return Status{}, err
	}
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return r.status(ctx, c, info)
	}
	if err != nil {
		return Status{}, err
	}
	exited, err := task.Wait(ctx)
	if err != nil {
		return Status{}, fmt.Errorf("stop container %s: %w", id, err)
	}
	sig, err := signal.ParseSignal(info.Labels[labelStopSignal])
	if err != nil {
		sig = syscall.SIGTERM
	}
	if err := task.Kill(ctx, sig); err != nil && !errdefs.IsNotFound(err) {
		return Status{}, fmt.Errorf("stop container %s: send %s: %w", id, sig, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-exited:
	case <-timer.C:
		if err := task.Kill(ctx, syscall.SIGKILL, containerd.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
			return Status{}, fmt.Errorf("stop container %s: SIGKILL: %w", id, err)
		}
		select {
		case <-exited:
		case <-ctx.Done():
			return Status{}, ctx.Err()
		}
	case <-ctx.Done():
		return Status{}, ctx.Err()
	}
	return r.status(ctx, c, info)
}

// RemoveContainer kills any process, deletes the container and its
// snapshot. Its log files stay (RemovePodLogs removes them).
func (r *Runtime) RemoveContainer(ctx context.Context, id string) error {
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if task, err := c.Task(ctx, nil); err == nil {
		dctx, cancel := uncancelled(ctx)
		_, err := task.Delete(dctx, containerd.WithProcessKill)
		cancel()
		if err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("remove container %s: delete task: %w", id, err)
		}
	}
	r.closeIO(id)
	if err := c.Delete(ctx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	return nil
}

// RemovePodLogs removes a pod's log directory.
func (r *Runtime) RemovePodLogs(pod PodRef) error {
	return os.RemoveAll(r.PodLogDir(pod))
}

// ContainerStatus returns a container with its current status. An exited
// task is recorded and deleted here (see the package doc).
func (r *Runtime) ContainerStatus(ctx context.Context, id string) (*Container, error) {
	ctx = r.ctx(ctx)
	c, info, err := r.load(ctx, id)
	if err != nil {
		return nil, err
	}
	st, err := r.status(ctx, c, info)
	if err != nil {
		return nil, err
	}
	out := fromInfo(info)
	out.Status = st
	return out, nil
}

// ListFilter selects containers; empty fields match everything.
type ListFilter struct {
	PodUID string
}

// ListContainers returns Flotilla's containers with their status, sorted
// by pod, name and attempt. This is how a restarted agent finds what runs.
func (r *Runtime) ListContainers(ctx context.Context, f ListFilter) ([]*Container, error) {
	ctx = r.ctx(ctx)
	filter := fmt.Sprintf("labels.%q", LabelPodUID)
	if f.PodUID != "" {
		filter = fmt.Sprintf("labels.%q==%q", LabelPodUID, f.PodUID)
	}
	cs, err := r.client.Containers(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	var out []*Container
	for _, c := range cs {
		info, err := c.Info(ctx)
		if errdefs.IsNotFound(err) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		st, err := r.status(ctx, c, info)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		x := fromInfo(info)
		x.Status = st
		out = append(out, x)
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
	return out, nil
}

// status reads the state; a stopped task is recorded and deleted.
//
// info may be older than the task it is compared with: another caller
// (the event watcher, a StopContainer) can record the exit and delete the
// task between the two reads. recordExit writes the exit labels before it
// deletes the task, so a task found missing is answered from a fresh read
// of the labels, which then has the exit whenever one was recorded.
func (r *Runtime) status(ctx context.Context, c containerd.Container, info containers.Container) (Status, error) {
	if st, ok := recorded(info.Labels); ok {
		return st, nil
	}
	task, err := c.Task(ctx, nil)
	if err == nil {
		var ts containerd.Status
		ts, err = task.Status(ctx)
		if err == nil {
			switch ts.Status {
			case containerd.Stopped:
				return r.recordExit(ctx, c, task, ts)
			case containerd.Created:
				return Status{State: StateCreated}, nil
			default:
				if interactive(info.Labels) {
					// After an agent restart: take the output over again.
					if _, err := r.reattach(ctx, c, info); err != nil {
						slog.Warn("reattach to container IO", "container", c.ID(), "err", err)
					}
				}
				return Status{State: StateRunning, Pid: task.Pid(), StartedAt: parseTime(info.Labels[labelStartedAt])}, nil
			}
		}
	}
	if !errdefs.IsNotFound(err) {
		return Status{}, fmt.Errorf("status of container %s: %w", c.ID(), err)
	}
	fresh, err := c.Info(ctx)
	if errdefs.IsNotFound(err) {
		return Status{}, fmt.Errorf("container %s: %w", c.ID(), ErrNotFound)
	}
	if err != nil {
		return Status{}, fmt.Errorf("status of container %s: %w", c.ID(), err)
	}
	if st, ok := recorded(fresh.Labels); ok {
		return st, nil
	}
	started := parseTime(fresh.Labels[labelStartedAt])
	if started.IsZero() {
		return Status{State: StateCreated}, nil
	}
	return Status{State: StateUnknown, ExitCode: 137, StartedAt: started, Reason: "ContainerStatusUnknown"}, nil
}

// recordExit saves an exited task's outcome on the container, then
// deletes the task. The order matters twice: a reader that finds the task
// gone must find the exit labels (see status), and an agent that dies
// between the two steps leaves a recorded exit behind, not a lost one.
// The OOM verdict is read from the memory cgroup, which exists until the
// task is deleted.
func (r *Runtime) recordExit(ctx context.Context, c containerd.Container, task containerd.Task, ts containerd.Status) (Status, error) {
	r.reapMu.Lock()
	defer r.reapMu.Unlock()
	info, err := c.Info(ctx)
	if errdefs.IsNotFound(err) {
		return Status{}, fmt.Errorf("container %s: %w", c.ID(), ErrNotFound)
	}
	if err != nil {
		return Status{}, fmt.Errorf("record exit of %s: %w", c.ID(), err)
	}
	if st, ok := recorded(info.Labels); ok {
		return st, nil // another caller got here first
	}
	oom := info.Labels[labelOOMKilled] == "true"
	if spec, err := c.Spec(ctx); err == nil && spec.Linux != nil && oomKilled(spec.Linux.CgroupsPath) {
		oom = true
	}
	finished := ts.ExitTime.UTC()
	if ts.ExitTime.IsZero() {
		finished = time.Now().UTC()
	}
	labels := map[string]string{
		labelExitCode:   strconv.FormatUint(uint64(ts.ExitStatus), 10),
		labelFinishedAt: finished.Format(time.RFC3339Nano),
	}
	if oom {
		labels[labelOOMKilled] = "true"
	}
	all, err := c.SetLabels(ctx, labels)
	if err != nil {
		return Status{}, fmt.Errorf("record exit of %s: %w", c.ID(), err)
	}
	dctx, cancel := uncancelled(ctx)
	_, err = task.Delete(dctx)
	cancel()
	if err != nil && !errdefs.IsNotFound(err) {
		// The exit is recorded; the stopped task goes with the container
		// (RemoveContainer deletes any task).
		slog.Warn("delete exited task", "container", c.ID(), "err", err)
	}
	r.closeIO(c.ID())
	st, _ := recorded(all)
	return st, nil
}

func recorded(l map[string]string) (Status, bool) {
	codeStr, ok := l[labelExitCode]
	if !ok {
		return Status{}, false
	}
	code, _ := strconv.Atoi(codeStr)
	st := Status{
		State:      StateExited,
		ExitCode:   int32(code),
		OOMKilled:  l[labelOOMKilled] == "true",
		StartedAt:  parseTime(l[labelStartedAt]),
		FinishedAt: parseTime(l[labelFinishedAt]),
	}
	switch {
	case st.OOMKilled:
		st.Reason = "OOMKilled"
	case code == 0:
		st.Reason = "Completed"
	default:
		st.Reason = "Error"
	}
	return st, true
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}
