package probes

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// worker probes one container for one kind, every period, applying the
// probe's thresholds before publishing a result.
type worker struct {
	m           *Manager
	k           key
	probe       *corev1.Probe
	container   *corev1.Container
	containerID string
	startedAt   time.Time

	mu    sync.Mutex
	pod   *corev1.Pod
	podIP string

	stopOnce sync.Once
	stopCh   chan struct{}

	lastRaw Result
	streak  int
	onHold  bool
}

func newWorker(m *Manager, k key, c *corev1.Container, r Running, pod *corev1.Pod, podIP string) *worker {
	var p *corev1.Probe
	switch k.kind {
	case Liveness:
		p = c.LivenessProbe
	case Readiness:
		p = c.ReadinessProbe
	case Startup:
		p = c.StartupProbe
	}
	return &worker{m: m, k: k, probe: p, container: c, containerID: r.ID, startedAt: r.StartedAt,
		pod: pod, podIP: podIP, stopCh: make(chan struct{})}
}

func (w *worker) stop() { w.stopOnce.Do(func() { close(w.stopCh) }) }

func (w *worker) setTarget(pod *corev1.Pod, podIP string) {
	w.mu.Lock()
	w.pod, w.podIP = pod, podIP
	w.mu.Unlock()
}

func seconds(v int32, def, min int32) time.Duration {
	if v <= 0 {
		v = def
	}
	if v < min {
		v = min
	}
	return time.Duration(v) * time.Second
}

func (w *worker) run(ctx context.Context) {
	period := seconds(w.probe.PeriodSeconds, 10, 1)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		w.once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-w.stopCh:
			return
		case <-t.C:
		}
	}
}

func (w *worker) once(ctx context.Context) {
	if w.onHold {
		return
	}
	w.mu.Lock()
	pod, podIP := w.pod, w.podIP
	w.mu.Unlock()
	switch w.k.kind {
	case Startup:
		if w.m.Started(pod, w.k.name, w.containerID) {
			return
		}
	default:
		if w.container.StartupProbe != nil && !w.m.Started(pod, w.k.name, w.containerID) {
			return
		}
	}
	if time.Since(w.startedAt) < time.Duration(w.probe.InitialDelaySeconds)*time.Second {
		return
	}
	timeout := seconds(w.probe.TimeoutSeconds, 1, 1)
	res, out := w.m.cfg.Runner.Probe(ctx, &w.probe.ProbeHandler, Target{PodIP: podIP, ContainerID: w.containerID, Ports: w.container.Ports}, timeout)
	select {
	case <-w.stopCh:
		return // the container changed while probing; the result is stale
	default:
	}
	if ctx.Err() != nil {
		return
	}
	if res == Failure && w.m.cfg.Reporter != nil {
		w.m.cfg.Reporter.ProbeFailed(pod, w.k.name, w.k.kind, out)
	}
	if res == w.lastRaw {
		w.streak++
	} else {
		w.lastRaw, w.streak = res, 1
	}
	failureThreshold := w.probe.FailureThreshold
	if failureThreshold <= 0 {
		failureThreshold = 3
	}
	successThreshold := w.probe.SuccessThreshold
	if successThreshold <= 0 {
		successThreshold = 1
	}
	if (res == Failure && w.streak < int(failureThreshold)) || (res == Success && w.streak < int(successThreshold)) {
		return
	}
	w.m.publish(w.k, w.containerID, res)
	if res == Failure && (w.k.kind == Liveness || w.k.kind == Startup) {
		// The kubelet restarts the container; this worker's container is
		// done, a new one gets a new worker.
		w.onHold = true
	}
}
