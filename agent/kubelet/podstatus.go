package kubelet

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/agent/runtime"
)

// statusInput is everything the pod status is computed from.
type statusInput struct {
	pod *corev1.Pod
	// old is the status last computed (or the hub's), for transition
	// times and the start time.
	old corev1.PodStatus
	// containers are the runtime's records by container name, attempts
	// in ascending order.
	containers   map[string][]*runtime.Container
	podIPs       []string
	hostIPs      []string
	sandboxReady bool
	waiting      map[string]waiting
	startErrors  map[string]string
	ready        func(name, id string) bool
	started      func(name, id string) bool
	imageID      func(image string) string
	now          time.Time
	// extra are conditions of Flotilla's own (api.ConditionImagesPrepulled),
	// reported after Kubernetes' ones.
	extra []corev1.PodCondition
}

// ts is a time as the API stores it (whole seconds, UTC), so a computed
// status compares equal to the one read back from the hub.
func ts(t time.Time) metav1.Time {
	if t.IsZero() {
		return metav1.Time{}
	}
	return metav1.NewTime(t.UTC().Truncate(time.Second))
}

// computeStatus is the pod status for in. Pure.
func computeStatus(in statusInput) corev1.PodStatus {
	pod := in.pod
	st := corev1.PodStatus{
		HostIP: first(in.hostIPs),
		PodIP:  first(in.podIPs),
	}
	for _, ip := range in.hostIPs {
		st.HostIPs = append(st.HostIPs, corev1.HostIP{IP: ip})
	}
	for _, ip := range in.podIPs {
		st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip})
	}
	if st.PodIP == "" && !in.sandboxReady {
		// A finished pod's sandbox is gone; its IP stays in the status,
		// as in Kubernetes.
		st.PodIP, st.PodIPs = in.old.PodIP, in.old.PodIPs
	}
	st.StartTime = in.old.StartTime
	if st.StartTime == nil {
		t := ts(in.now)
		st.StartTime = &t
	}
	st.QOSClass = in.old.QOSClass
	if st.QOSClass == "" {
		st.QOSClass = qosClass(&pod.Spec)
	}

	initDone := true
	var incompleteInit []string
	var unready []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		cs := containerStatus(in, c, true, false)
		st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
		if isSidecar(c) {
			// A sidecar counts as initialized once started, and its
			// readiness counts towards the pod's.
			if cs.RestartCount == 0 && (cs.State.Running == nil || !*cs.Started) {
				initDone = false
				incompleteInit = append(incompleteInit, c.Name)
			}
			if !cs.Ready {
				unready = append(unready, c.Name)
			}
			continue
		}
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
			initDone = false
			incompleteInit = append(incompleteInit, c.Name)
		}
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cs := containerStatus(in, c, false, initDone)
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
		if !cs.Ready {
			unready = append(unready, c.Name)
		}
	}

	st.Phase = podPhase(&pod.Spec, st.InitContainerStatuses, st.ContainerStatuses)
	if in.old.Phase == corev1.PodSucceeded || in.old.Phase == corev1.PodFailed {
		st.Phase = in.old.Phase
	}

	cond := func(t corev1.PodConditionType, ok bool, reason, msg string) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s, reason, msg = corev1.ConditionTrue, "", ""
		}
		c := corev1.PodCondition{Type: t, Status: s, Reason: reason, Message: msg}
		if prev := findCondition(in.old.Conditions, t); prev != nil && prev.Status == s {
			c.LastTransitionTime, c.LastProbeTime = prev.LastTransitionTime, prev.LastProbeTime
		} else {
			c.LastTransitionTime = ts(in.now)
		}
		return c
	}
	completed := st.Phase == corev1.PodSucceeded
	containersReady := len(unready) == 0 && !completed
	crReason, crMsg := "ContainersNotReady", fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	if completed {
		crReason, crMsg = "PodCompleted", ""
	}
	readyOK, readyReason, readyMsg := containersReady, crReason, crMsg
	if containersReady {
		if msg := gatesNotReady(pod); msg != "" {
			readyOK, readyReason, readyMsg = false, "ReadinessGatesNotReady", msg
		}
	}
	initReason, initMsg := "ContainersNotInitialized", fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(incompleteInit, " "))
	scheduled := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: ts(in.now)}
	if prev := findCondition(in.old.Conditions, corev1.PodScheduled); prev != nil && prev.Status == corev1.ConditionTrue {
		scheduled = *prev
	}
	st.Conditions = []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, in.sandboxReady, "", ""),
		cond(corev1.PodInitialized, initDone || completed, initReason, initMsg),
		cond(corev1.PodReady, readyOK, readyReason, readyMsg),
		cond(corev1.ContainersReady, containersReady, crReason, crMsg),
		scheduled,
	}
	for _, c := range in.extra {
		if prev := findCondition(in.old.Conditions, c.Type); prev != nil && prev.Status == c.Status {
			c.LastTransitionTime = prev.LastTransitionTime
		} else {
			c.LastTransitionTime = ts(in.now)
		}
		st.Conditions = append(st.Conditions, c)
	}
	return st
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func findCondition(cs []corev1.PodCondition, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

// gatesNotReady says which readiness gate holds the pod back ("" if none).
func gatesNotReady(pod *corev1.Pod) string {
	for _, g := range pod.Spec.ReadinessGates {
		c := findCondition(pod.Status.Conditions, g.ConditionType)
		if c == nil {
			return fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", g.ConditionType)
		}
		if c.Status != corev1.ConditionTrue {
			return fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %s", g.ConditionType, c.Status)
		}
	}
	return ""
}

func containerStatus(in statusInput, c *corev1.Container, isInit, initDone bool) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image}
	f := false
	cs.Started = &f
	attempts := in.containers[c.Name]
	if len(attempts) == 0 {
		w, ok := in.waiting[c.Name]
		if !ok {
			w.Reason = "ContainerCreating"
			if isInit || !initDone {
				w.Reason = "PodInitializing"
			}
		}
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: w.Reason, Message: w.Message}
		return cs
	}
	latest := attempts[len(attempts)-1]
	var prev *runtime.Container
	if len(attempts) > 1 {
		prev = attempts[len(attempts)-2]
	}
	cs.RestartCount = int32(latest.Attempt)
	cs.ContainerID = "containerd://" + latest.ID
	if in.imageID != nil {
		cs.ImageID = in.imageID(latest.Image)
	}
	if latest.Status.State == runtime.StateRunning {
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: ts(latest.Status.StartedAt)}
		started := in.started == nil || in.started(c.Name, latest.ID)
		cs.Started = &started
		if !isInit || isSidecar(c) {
			cs.Ready = in.ready == nil || in.ready(c.Name, latest.ID)
		}
		if prev != nil {
			cs.LastTerminationState.Terminated = terminated(prev, in.startErrors)
		}
		return cs
	}
	term := terminated(latest, in.startErrors)
	if w, ok := in.waiting[c.Name]; ok {
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: w.Reason, Message: w.Message}
		cs.LastTerminationState.Terminated = term
		return cs
	}
	cs.State.Terminated = term
	if prev != nil {
		cs.LastTerminationState.Terminated = terminated(prev, in.startErrors)
	}
	// A completed init container reads as ready, as in Kubernetes.
	cs.Ready = isInit && term.ExitCode == 0 && term.Reason == "Completed"
	return cs
}

// terminated is a finished container attempt's state. A container that
// was created but never started failed to start.
func terminated(c *runtime.Container, startErrors map[string]string) *corev1.ContainerStateTerminated {
	st := c.Status
	t := &corev1.ContainerStateTerminated{ContainerID: "containerd://" + c.ID}
	switch st.State {
	case runtime.StateExited:
		t.ExitCode, t.Reason = st.ExitCode, st.Reason
		t.StartedAt, t.FinishedAt = ts(st.StartedAt), ts(st.FinishedAt)
	case runtime.StateUnknown:
		t.ExitCode, t.Reason = 137, "ContainerStatusUnknown"
		t.Message = "The container could not be located when the pod was terminated"
		t.StartedAt = ts(st.StartedAt)
	default:
		t.ExitCode, t.Reason = 128, "StartError"
		t.Message = startErrors[c.ID]
		t.FinishedAt = ts(c.CreatedAt)
	}
	return t
}

// exitCode is the code restart decisions use (a start failure is 128).
func exitCode(c *runtime.Container) int32 {
	switch c.Status.State {
	case runtime.StateExited:
		return c.Status.ExitCode
	case runtime.StateUnknown:
		return 137
	}
	return 128
}

// finishedAt is when an attempt ended, for backoff.
func finishedAt(c *runtime.Container) time.Time {
	if !c.Status.FinishedAt.IsZero() {
		return c.Status.FinishedAt
	}
	return c.CreatedAt
}

// shouldRestart applies the pod's restartPolicy to a finished attempt.
func shouldRestart(policy corev1.RestartPolicy, c *runtime.Container) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exitCode(c) != 0
	}
	return true
}

// podPhase is Kubernetes' getPhase: Pending until init containers are
// done and every app container ran; Running while any runs or will be
// restarted; Succeeded or Failed once all have stopped for good.
func podPhase(spec *corev1.PodSpec, inits, apps []corev1.ContainerStatus) corev1.PodPhase {
	pendingInit, failedInit := 0, 0
	for i, cs := range inits {
		if i < len(spec.InitContainers) && isSidecar(&spec.InitContainers[i]) {
			// Sidecars run beside the app; only one never started
			// holds the pod back.
			if cs.RestartCount == 0 && cs.State.Running == nil {
				pendingInit++
			}
			continue
		}
		switch {
		case cs.State.Terminated != nil:
			if cs.State.Terminated.ExitCode != 0 {
				failedInit++
			}
		case cs.State.Running != nil:
			pendingInit++
		case cs.State.Waiting != nil:
			if t := cs.LastTerminationState.Terminated; t != nil && t.ExitCode != 0 {
				failedInit++
			} else {
				pendingInit++
			}
		default:
			pendingInit++
		}
	}
	if failedInit > 0 && spec.RestartPolicy == corev1.RestartPolicyNever {
		return corev1.PodFailed
	}
	if pendingInit > 0 || failedInit > 0 {
		return corev1.PodPending
	}
	unknown, running, waiting, stopped, succeeded := 0, 0, 0, 0, 0
	for _, cs := range apps {
		switch {
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil:
			stopped++
			if cs.State.Terminated.ExitCode == 0 {
				succeeded++
			}
		case cs.State.Waiting != nil:
			if cs.LastTerminationState.Terminated != nil {
				stopped++
			} else {
				waiting++
			}
		default:
			unknown++
		}
	}
	switch {
	case waiting > 0:
		return corev1.PodPending
	case running > 0 && unknown == 0:
		return corev1.PodRunning
	case running == 0 && stopped > 0 && unknown == 0:
		if spec.RestartPolicy == corev1.RestartPolicyAlways {
			return corev1.PodRunning
		}
		if stopped == succeeded {
			return corev1.PodSucceeded
		}
		if spec.RestartPolicy == corev1.RestartPolicyNever {
			return corev1.PodFailed
		}
		return corev1.PodRunning
	}
	return corev1.PodPending
}

// qosClass is Kubernetes' QoS class of a pod.
func qosClass(spec *corev1.PodSpec) corev1.PodQOSClass {
	requests, limits := corev1.ResourceList{}, corev1.ResourceList{}
	guaranteed := true
	all := append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
	for _, c := range all {
		for n, q := range c.Resources.Requests {
			if n != corev1.ResourceCPU && n != corev1.ResourceMemory || q.IsZero() {
				continue
			}
			v := requests[n]
			v.Add(q)
			requests[n] = v
		}
		have := map[corev1.ResourceName]bool{}
		for n, q := range c.Resources.Limits {
			if n != corev1.ResourceCPU && n != corev1.ResourceMemory || q.IsZero() {
				continue
			}
			have[n] = true
			v := limits[n]
			v.Add(q)
			limits[n] = v
		}
		if !have[corev1.ResourceCPU] || !have[corev1.ResourceMemory] {
			guaranteed = false
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return corev1.PodQOSBestEffort
	}
	if guaranteed {
		for n, r := range requests {
			if l, ok := limits[n]; !ok || l.Cmp(r) != 0 {
				guaranteed = false
			}
		}
	}
	if guaranteed && len(limits) == 2 {
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

// byAttempt groups containers by name, attempts ascending.
func byAttempt(cs []*runtime.Container) map[string][]*runtime.Container {
	out := map[string][]*runtime.Container{}
	for _, c := range cs {
		out[c.Name] = append(out[c.Name], c)
	}
	for _, list := range out {
		sort.Slice(list, func(i, j int) bool { return list[i].Attempt < list[j].Attempt })
	}
	return out
}
