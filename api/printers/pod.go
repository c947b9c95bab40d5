package printers

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"flotilla.dev/flotilla/api/podutil"
)

// NodeLostReason is the pod status reason the node lifecycle controller
// sets on pods of an unreachable node.
const NodeLostReason = "NodeLost"

// PodSummary is what the pod columns say about a pod.
type PodSummary struct {
	// Status is kubectl's STATUS word: the phase, unless a reason (a
	// container waiting or terminated, an init container not done, a
	// deletion in progress) says more.
	Status string
	// Ready and Total count ready containers of the regular ones plus
	// restartable init containers (sidecars).
	Ready, Total int
	// Restarts counts container restarts; LastRestart is when the most
	// recent restarted container last terminated (zero when unknown).
	Restarts    int
	LastRestart time.Time
}

// PodStatus is the word kubectl shows in a pod's STATUS column.
func PodStatus(pod *corev1.Pod) string { return SummarizePod(pod).Status }

// SummarizePod computes the READY, STATUS and RESTARTS columns of a pod.
//
// The rules, in order of precedence (later rules override earlier ones):
//  1. the phase, or status.reason when set, or SchedulingGated;
//  2. while init containers run: the first init container not yet done
//     decides (Init:<reason>, Init:ExitCode:N, Init:Signal:N or Init:i/n);
//  3. once initialised: the first regular container that is waiting or
//     terminated decides with its reason (or ExitCode:N / Signal:N); a pod
//     "Completed" while a container still runs is Running or NotReady
//     depending on its Ready condition;
//  4. a pod being deleted is Terminating, or Unknown when its node is lost.
func SummarizePod(pod *corev1.Pod) PodSummary {
	s := PodSummary{Total: len(pod.Spec.Containers)}
	status := string(pod.Status.Phase)
	if pod.Status.Reason != "" {
		status = pod.Status.Reason
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonSchedulingGated {
			status = corev1.PodReasonSchedulingGated
		}
	}

	sidecars := map[string]bool{}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars[c.Name] = true
			s.Total++
		}
	}

	// Restarts of sidecars always count; restarts of ordinary init
	// containers count only while the pod is still initialising.
	var all, sidecar restartCount
	initializing := false
	for i, st := range pod.Status.InitContainerStatuses {
		all.add(st)
		if sidecars[st.Name] {
			sidecar.add(st)
		}
		term, wait := st.State.Terminated, st.State.Waiting
		if term != nil && term.ExitCode == 0 {
			continue
		}
		if sidecars[st.Name] && st.Started != nil && *st.Started {
			if st.Ready {
				s.Ready++
			}
			continue
		}
		initializing = true
		switch {
		case term != nil && term.Reason != "":
			status = "Init:" + term.Reason
		case term != nil && term.Signal != 0:
			status = fmt.Sprintf("Init:Signal:%d", term.Signal)
		case term != nil:
			status = fmt.Sprintf("Init:ExitCode:%d", term.ExitCode)
		case wait != nil && wait.Reason != "" && wait.Reason != "PodInitializing":
			status = "Init:" + wait.Reason
		default:
			status = fmt.Sprintf("Init:%d/%d", i, len(pod.Spec.InitContainers))
		}
		break
	}

	counted := all
	if !initializing || podutil.ConditionTrue(&pod.Status, corev1.PodInitialized) {
		counted = sidecar
		running := false
		// Walk backwards so that the first container's word wins.
		for i := len(pod.Status.ContainerStatuses) - 1; i >= 0; i-- {
			st := pod.Status.ContainerStatuses[i]
			counted.add(st)
			term, wait := st.State.Terminated, st.State.Waiting
			switch {
			case wait != nil && wait.Reason != "":
				status = wait.Reason
			case term != nil && term.Reason != "":
				status = term.Reason
			case term != nil && term.Signal != 0:
				status = fmt.Sprintf("Signal:%d", term.Signal)
			case term != nil:
				status = fmt.Sprintf("ExitCode:%d", term.ExitCode)
			case st.Ready && st.State.Running != nil:
				running = true
				s.Ready++
			}
		}
		if status == "Completed" && running {
			if podutil.IsReady(pod) {
				status = string(corev1.PodRunning)
			} else {
				status = "NotReady"
			}
		}
	}
	s.Restarts, s.LastRestart = counted.n, counted.last

	if pod.DeletionTimestamp != nil {
		switch {
		case pod.Status.Reason == NodeLostReason:
			status = string(corev1.PodUnknown)
		case pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed:
			status = "Terminating"
		}
	}
	s.Status = status
	return s
}

type restartCount struct {
	n    int
	last time.Time
}

func (r *restartCount) add(st corev1.ContainerStatus) {
	r.n += int(st.RestartCount)
	if t := st.LastTerminationState.Terminated; t != nil && t.FinishedAt.Time.After(r.last) {
		r.last = t.FinishedAt.Time
	}
}
