package probes

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Kind is which probe.
type Kind string

const (
	Liveness  Kind = "Liveness"
	Readiness Kind = "Readiness"
	Startup   Kind = "Startup"
)

// Running is a running container of a pod, as the kubelet sees it.
type Running struct {
	Name      string
	ID        string
	StartedAt time.Time
	// WasReady seeds readiness for a container the agent adopts after a
	// restart, so that Ready does not flap while the first probe runs.
	WasReady bool
}

// Reporter is told about probe failures, for Events ("Unhealthy").
type Reporter interface {
	ProbeFailed(pod *corev1.Pod, container string, kind Kind, output string)
}

// Config configures a Manager.
type Config struct {
	Runner *Runner
	// OnChange is called with the pod's UID whenever a published result
	// changes (readiness flips, liveness fails ...).
	OnChange func(types.UID)
	Reporter Reporter
}

type key struct {
	pod  types.UID
	name string
	kind Kind
}

type state struct {
	containerID string
	result      Result
}

// Manager runs one worker per probe of each running container and keeps
// their published results.
type Manager struct {
	cfg Config

	mu      sync.Mutex
	workers map[key]*worker
	results map[key]state
}

// NewManager returns a Manager.
func NewManager(cfg Config) *Manager {
	return &Manager{cfg: cfg, workers: map[key]*worker{}, results: map[key]state{}}
}

// Sync makes the probe workers match the pod's running containers:
// workers start for containers (or new container IDs) with probes and
// stop for containers no longer running. ctx bounds the workers' lives.
func (m *Manager) Sync(ctx context.Context, pod *corev1.Pod, podIP string, running []Running) {
	specs := map[string]*corev1.Container{}
	for i := range pod.Spec.Containers {
		specs[pod.Spec.Containers[i].Name] = &pod.Spec.Containers[i]
	}
	for i := range pod.Spec.InitContainers {
		// Sidecars (restartPolicy Always) are probed like app containers.
		specs[pod.Spec.InitContainers[i].Name] = &pod.Spec.InitContainers[i]
	}
	want := map[key]Running{}
	for _, r := range running {
		c := specs[r.Name]
		if c == nil {
			continue
		}
		for kind, p := range map[Kind]*corev1.Probe{Liveness: c.LivenessProbe, Readiness: c.ReadinessProbe, Startup: c.StartupProbe} {
			if p != nil {
				want[key{pod.UID, r.Name, kind}] = r
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, w := range m.workers {
		if k.pod != pod.UID {
			continue
		}
		r, ok := want[k]
		if !ok || r.ID != w.containerID {
			w.stop()
			delete(m.workers, k)
			continue
		}
		w.setTarget(pod, podIP)
	}
	for k, r := range want {
		if _, ok := m.workers[k]; ok {
			continue
		}
		c := specs[k.name]
		initial := Unknown
		switch k.kind {
		case Readiness:
			initial = Failure
			if r.WasReady {
				initial = Success
			}
		case Liveness:
			initial = Success
		}
		if st, ok := m.results[k]; !ok || st.containerID != r.ID {
			m.results[k] = state{containerID: r.ID, result: initial}
		}
		w := newWorker(m, k, c, r, pod, podIP)
		m.workers[k] = w
		go w.run(ctx)
	}
}

// RemovePod stops the pod's workers and forgets its results.
func (m *Manager) RemovePod(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, w := range m.workers {
		if k.pod == uid {
			w.stop()
			delete(m.workers, k)
		}
	}
	for k := range m.results {
		if k.pod == uid {
			delete(m.results, k)
		}
	}
}

func (m *Manager) result(uid types.UID, name, id string, kind Kind) (Result, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.results[key{uid, name, kind}]
	if !ok || st.containerID != id {
		return Unknown, false
	}
	return st.result, true
}

// Ready reports whether container id passes its readiness probe (true
// when it has none). A container that has not started (startup probe)
// is not ready.
func (m *Manager) Ready(pod *corev1.Pod, name, id string) bool {
	c := container(pod, name)
	if c == nil || !m.Started(pod, name, id) {
		return false
	}
	if c.ReadinessProbe == nil {
		return true
	}
	r, _ := m.result(pod.UID, name, id, Readiness)
	return r == Success
}

// Started reports whether container id passed its startup probe (true
// when it has none).
func (m *Manager) Started(pod *corev1.Pod, name, id string) bool {
	c := container(pod, name)
	if c == nil {
		return false
	}
	if c.StartupProbe == nil {
		return true
	}
	r, _ := m.result(pod.UID, name, id, Startup)
	return r == Success
}

// Failed reports the probe (liveness or startup) that container id
// failed, if any: the kubelet kills and restarts it.
func (m *Manager) Failed(pod *corev1.Pod, name, id string) (Kind, bool) {
	for _, k := range []Kind{Startup, Liveness} {
		if r, _ := m.result(pod.UID, name, id, k); r == Failure {
			return k, true
		}
	}
	return "", false
}

func (m *Manager) publish(k key, id string, r Result) {
	m.mu.Lock()
	st, ok := m.results[k]
	changed := !ok || st.containerID != id || st.result != r
	m.results[k] = state{containerID: id, result: r}
	m.mu.Unlock()
	if changed && m.cfg.OnChange != nil {
		m.cfg.OnChange(k.pod)
	}
}

func container(pod *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}
