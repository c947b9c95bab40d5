package waves

import (
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"flotilla.dev/flotilla/api/podutil"
	"flotilla.dev/flotilla/api/v1alpha1"
)

// Outcome of a wave.
type Outcome int

const (
	// Pending: devices are still updating or proving themselves.
	Pending Outcome = iota
	Succeeded
	Failed
)

const reasonImageSignature = "ErrImageSignature"

// Waiting reasons that mean a container will not come up by itself.
var failingReasons = map[string]bool{
	"CrashLoopBackOff": true, "ImagePullBackOff": true, "ErrImagePull": true, "InvalidImageName": true,
	"ErrImageNeverPull": true, "CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
	// Flotilla's agent refuses images whose signature it cannot verify
	// (registry/trust.WaitingReason, written out so that flotctl, which
	// reads these rules, does not link the verifier; a test keeps them
	// equal).
	reasonImageSignature: true, "SignatureValidationFailed": true,
}

// Result is one wave's judgement.
type Result struct {
	Outcome  Outcome
	Devices  int
	Done     int
	Failures []v1alpha1.DeviceFailure
	// RecheckAfter is when the judgement may change by time alone (a
	// device's readySeconds or the wave's timeout passing); 0 for never.
	RecheckAfter time.Duration
}

// Judge decides a wave: its devices (node names), each device's pods of
// the workload, the pod label that carries a pod's revision
// (controller-revision-hash for a DaemonSet, pod-template-hash for a
// Deployment), the revision being rolled out, when the wave started and
// the criteria. A device is done once a pod of revision has been Ready for
// readySeconds; it has failed when such a pod is crash-looping, cannot get
// its image, or failed, or when it is not Ready by timeoutSeconds after
// the wave started — so a device offline during its wave fails only then.
func Judge(devices []string, podsOf map[string][]*corev1.Pod, revisionLabel, revision string, started, now time.Time, c v1alpha1.SuccessCriteria) Result {
	readySeconds := ptrOr(c.ReadySeconds, 0)
	timeout := time.Duration(ptrOr(c.TimeoutSeconds, 0)) * time.Second
	deadline := started.Add(timeout)
	r := Result{Devices: len(devices)}
	sorted := append([]string(nil), devices...)
	sort.Strings(sorted)
	var recheck time.Time
	later := func(t time.Time) {
		if t.After(now) && (recheck.IsZero() || t.Before(recheck)) {
			recheck = t
		}
	}
	for _, node := range sorted {
		var pod *corev1.Pod
		for _, p := range podsOf[node] {
			if p.Labels[revisionLabel] == revision && p.DeletionTimestamp == nil {
				pod = p
				break
			}
		}
		if pod != nil {
			if podutil.IsAvailable(pod, readySeconds, now) && podutil.IsReady(pod) {
				r.Done++
				continue
			}
			if f, bad := failing(node, pod); bad {
				r.Failures = append(r.Failures, f)
				continue
			}
			if since := podutil.ReadySince(pod); since != nil && podutil.IsReady(pod) {
				// Ready, proving itself: the timeout is about becoming
				// Ready, not about staying so.
				later(since.Add(time.Duration(readySeconds) * time.Second))
				continue
			}
		}
		if !now.Before(deadline) {
			msg := fmt.Sprintf("not Ready on revision %s within %s of the wave's start", revision, timeout)
			if pod == nil {
				msg = fmt.Sprintf("no pod of revision %s within %s of the wave's start (device offline or not yet updated)", revision, timeout)
			}
			r.Failures = append(r.Failures, v1alpha1.DeviceFailure{Node: node, Reason: "NotReadyInTime", Message: msg})
			continue
		}
		later(deadline)
	}
	failed := len(r.Failures)
	switch {
	case failed > MaxFailures(c.MaxFailures, len(devices)):
		r.Outcome = Failed
	case r.Done+failed == len(devices):
		r.Outcome = Succeeded
	default:
		r.Outcome = Pending
	}
	if !recheck.IsZero() && r.Outcome == Pending {
		r.RecheckAfter = recheck.Sub(now)
	}
	return r
}

// MaxFailures is how many of a wave's devices may fail: a count, or a
// percentage of them rounded down (so "10%" of 5 devices tolerates none).
func MaxFailures(v *intstr.IntOrString, devices int) int {
	if v == nil {
		return 0
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, devices, false)
	if err != nil {
		return 0
	}
	return n
}

// failing tells whether pod is failing by itself, and why.
func failing(node string, pod *corev1.Pod) (v1alpha1.DeviceFailure, bool) {
	if pod.Status.Phase == corev1.PodFailed {
		return v1alpha1.DeviceFailure{Node: node, Reason: "PodFailed", Message: firstNonEmpty(pod.Status.Message, pod.Status.Reason, "the pod failed")}, true
	}
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			if w := cs.State.Waiting; w != nil && failingReasons[w.Reason] {
				return v1alpha1.DeviceFailure{Node: node, Reason: w.Reason, Message: cs.Name + ": " + firstNonEmpty(w.Message, w.Reason)}, true
			}
		}
	}
	return v1alpha1.DeviceFailure{}, false
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
