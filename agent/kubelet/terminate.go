package kubelet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/agent/kubelet/probes"
	"flotilla.dev/flotilla/agent/runtime"
)

// syncGone stops a pod that no source wants any more (deleted from the
// hub, moved, or found in containerd after a restart) and removes
// everything it had.
func (k *Kubelet) syncGone(ctx context.Context, w *podWorker, cs []*runtime.Container, sb *runtime.Sandbox) (syncResult, error) {
	if _, err := os.Stat(k.volumes.PodDir(w.uid)); len(cs) == 0 && sb == nil && errors.Is(err, os.ErrNotExist) {
		k.forget(w)
		return syncResult{done: true}, nil
	}
	w.setState(podTerminating)
	grace := k.cfg.OrphanGracePeriod
	if w.lastPod != nil {
		grace = podGrace(w.lastPod)
	}
	if err := k.killPod(ctx, w.lastPod, cs, sb, grace); err != nil {
		return syncResult{}, err
	}
	if err := k.cleanup(ctx, w, cs, sb, false); err != nil {
		return syncResult{}, err
	}
	k.removeLogs(w.lastPod, cs)
	k.forget(w)
	w.setState(podFinished)
	return syncResult{done: true}, nil
}

// syncDeleted terminates a pod being deleted on the hub (preStop hooks,
// stop signals, SIGKILL after the grace period), releases its network and
// sandbox, then finishes the deletion on the hub.
func (k *Kubelet) syncDeleted(ctx context.Context, w *podWorker, pod *corev1.Pod, cs []*runtime.Container, sb *runtime.Sandbox) (syncResult, error) {
	w.setState(podTerminating)
	if err := k.killPod(ctx, pod, cs, sb, podGrace(pod)); err != nil {
		return syncResult{}, err
	}
	if err := k.cleanup(ctx, w, cs, sb, false); err != nil {
		return syncResult{}, err
	}
	k.removeLogs(pod, cs)
	if k.hub != nil {
		if _, ok := k.hub.Get(pod.UID); ok {
			zero := int64(0)
			err := k.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
				GracePeriodSeconds: &zero,
				Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
			})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return syncResult{}, fmt.Errorf("finish deleting pod %s/%s on the hub: %w", pod.Namespace, pod.Name, err)
			}
		}
	}
	// The hub's delete event ends this worker (through syncGone).
	return syncResult{requeue: time.Second}, nil
}

// syncTerminal releases what a finished pod no longer needs (its
// network, sandbox and volumes) and keeps its containers' records for
// its status and logs.
func (k *Kubelet) syncTerminal(ctx context.Context, w *podWorker, pod *corev1.Pod, cs []*runtime.Container, sb *runtime.Sandbox) (syncResult, error) {
	w.setState(podFinished)
	if err := k.killPod(ctx, pod, cs, sb, podGrace(pod)); err != nil {
		return syncResult{}, err
	}
	k.probes.RemovePod(pod.UID)
	if sb != nil {
		if err := k.cniTeardown(ctx, sb); err != nil {
			return syncResult{}, err
		}
		if err := k.rt.RemoveSandbox(ctx, sb.ID); err != nil {
			return syncResult{}, err
		}
	}
	if err := k.volumes.TearDown(pod.UID); err != nil {
		return syncResult{}, err
	}
	if len(cs) == 0 {
		// Nothing left to read the status from (a reboot removed the
		// records): the one on the hub stays as it is.
		return syncResult{}, nil
	}
	// Re-read: killPod may have changed what it stopped.
	if fresh, err := k.listContainers(ctx, pod.UID); err == nil {
		cs = fresh
	}
	k.updateStatus(ctx, w, pod, nil, cs)
	return syncResult{}, nil
}

// killPod stops the pod's running containers in parallel, each with its
// preStop hook and the grace period; sidecars go after the others, as in
// Kubernetes, within the same grace period.
func (k *Kubelet) killPod(ctx context.Context, pod *corev1.Pod, cs []*runtime.Container, sb *runtime.Sandbox, grace time.Duration) error {
	if pod == nil {
		return k.killWave(ctx, nil, cs, sb, grace)
	}
	var main, side []*runtime.Container
	for _, c := range cs {
		if spec := containerSpec(pod, c.Name); spec != nil && isSidecar(spec) {
			side = append(side, c)
		} else {
			main = append(main, c)
		}
	}
	start := time.Now()
	err := k.killWave(ctx, pod, main, sb, grace)
	return errors.Join(err, k.killWave(ctx, pod, side, sb, grace-time.Since(start)))
}

func (k *Kubelet) killWave(ctx context.Context, pod *corev1.Pod, cs []*runtime.Container, sb *runtime.Sandbox, grace time.Duration) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, c := range cs {
		if c.Status.State != runtime.StateRunning {
			continue
		}
		var spec *corev1.Container
		if pod != nil {
			spec = containerSpec(pod, c.Name)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := k.killContainer(ctx, pod, spec, c, sb, grace); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// killContainer runs c's preStop hook (bounded by grace), then sends its
// stop signal and SIGKILL once the rest of the grace period (at least
// MinGracePeriod) has passed.
func (k *Kubelet) killContainer(ctx context.Context, pod *corev1.Pod, spec *corev1.Container, c *runtime.Container, sb *runtime.Sandbox, grace time.Duration) error {
	start := time.Now()
	if spec != nil && spec.Lifecycle != nil && spec.Lifecycle.PreStop != nil {
		target := probes.Target{ContainerID: c.ID, Ports: spec.Ports}
		if sb != nil {
			target.PodIP = sb.IP
		}
		hctx, cancel := context.WithTimeout(ctx, grace)
		err := k.runner.Hook(hctx, spec.Lifecycle.PreStop, target, grace)
		cancel()
		if err != nil {
			k.event(pod, c.Name, corev1.EventTypeWarning, "FailedPreStopHook", "PreStopHook failed: %v", err)
		}
	}
	remaining := grace - time.Since(start)
	if remaining < k.cfg.MinGracePeriod {
		remaining = k.cfg.MinGracePeriod
	}
	k.event(pod, c.Name, corev1.EventTypeNormal, "Killing", "Stopping container %s", c.Name)
	if _, err := k.rt.StopContainer(ctx, c.ID, remaining); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		k.event(pod, c.Name, corev1.EventTypeWarning, "FailedKillPod", "error killing container %s: %v", c.Name, err)
		return err
	}
	return nil
}

func containerSpec(pod *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// cleanup detaches the pod's network and removes its containers (unless
// keep), sandbox and volumes.
func (k *Kubelet) cleanup(ctx context.Context, w *podWorker, cs []*runtime.Container, sb *runtime.Sandbox, keep bool) error {
	k.probes.RemovePod(w.uid)
	if sb != nil {
		if err := k.cniTeardown(ctx, sb); err != nil {
			return err
		}
	}
	if !keep {
		for _, c := range cs {
			if err := k.rt.RemoveContainer(ctx, c.ID); err != nil {
				return err
			}
		}
	}
	if sb != nil {
		if err := k.rt.RemoveSandbox(ctx, sb.ID); err != nil {
			return err
		}
	}
	return k.volumes.TearDown(w.uid)
}

func (k *Kubelet) removeLogs(pod *corev1.Pod, cs []*runtime.Container) {
	var ref runtime.PodRef
	switch {
	case pod != nil:
		ref = runtime.PodRef{UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name}
	case len(cs) > 0:
		ref = cs[0].Pod
	default:
		return
	}
	if err := k.rt.RemovePodLogs(ref); err != nil {
		k.log.Warn("remove pod logs", "pod", ref.String(), "err", err)
	}
}

// forget drops everything the kubelet kept about a pod.
func (k *Kubelet) forget(w *podWorker) {
	k.status.Forget(w.uid)
	k.probes.RemovePod(w.uid)
	k.objects.removePod(w.uid)
	k.crashBackoff.forget(string(w.uid) + "/")
	k.imageBackoff.forget(string(w.uid) + "/")
	k.forgetPrepull(w.uid)
	k.mu.Lock()
	for id, uid := range k.containers {
		if uid == w.uid {
			delete(k.containers, id)
		}
	}
	k.mu.Unlock()
}
