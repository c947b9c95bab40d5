package diagnose

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"flotilla.dev/flotilla/api/podutil"
	"flotilla.dev/flotilla/api/printers"
)

// imageReasons are the waiting reasons of a container whose image could not
// be had.
var imageReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
	"RegistryUnavailable": true, "ImageInspectError": true,
}

// configReasons are the waiting reasons of a container the agent could not
// create from its spec.
var configReasons = map[string]bool{
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
	"PreCreateHookError": true, "PreStartHookError": true, "PostStartHookError": true,
}

// Pod diagnoses a pod along its life: scheduling, the device it is bound
// to, starting, images, the application, readiness and termination.
func Pod(pod *corev1.Pod, f *Facts) Finding {
	now := f.now()
	fd := Finding{Object: objectName("Pod", pod.Namespace, pod.Name)}
	events := f.EventsFor("Pod", pod.Namespace, pod.Name)
	status := printers.PodStatus(pod)
	node := pod.Spec.NodeName

	if pod.DeletionTimestamp != nil {
		return podDeletion(pod, f, fd, events, now)
	}
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		fd.Stage, fd.Summary = StageDone, "completed"
		return fd
	case corev1.PodFailed:
		fd.Severity, fd.Stage, fd.Owner = Warning, StageRunning, "the application"
		fd.Summary = "failed: " + status
		if pod.Status.Message != "" {
			fd.Details = append(fd.Details, pod.Status.Message)
		}
		if c := worstTerminated(pod); c != "" {
			fd.Details = append(fd.Details, c)
		}
		return fd
	}

	if node == "" {
		return podUnscheduled(pod, fd, events, now)
	}
	if n := f.node(node); n != nil {
		if ready, why := nodeReady(n, f, now); !ready {
			fd.Severity, fd.Stage, fd.Owner = Critical, StageDevice, "the agent on device "+node+" (or its link)"
			fd.Summary = fmt.Sprintf("bound to device %s, which is %s", node, why)
			fd.Details = append(fd.Details, "the pod's state is as last reported before the device went away")
			return fd
		}
	} else if len(f.Nodes) > 0 {
		fd.Severity, fd.Stage, fd.Owner = Critical, StageDevice, "whoever removed device "+node
		fd.Summary = fmt.Sprintf("bound to device %s, which is not registered with the hub", node)
		return fd
	}

	// The first container that is not running decides, init containers
	// first since the others wait for them.
	if c := firstBlocked(pod); c != nil {
		return containerBlocked(pod, c, fd, events, f, now)
	}

	if pod.Status.Phase == corev1.PodPending || len(pod.Status.ContainerStatuses) == 0 {
		fd.Severity, fd.Stage, fd.Owner = Warning, StageStarting, "the agent on device "+node
		fd.Summary = fmt.Sprintf("scheduled to %s but not started (%s)", node, status)
		if e := lastFrom(events, notScheduler); e != nil {
			fd.Details = append(fd.Details, "last event: "+eventLine(now, *e))
		} else {
			fd.Details = append(fd.Details, "no event from the agent yet: is flotilla-agent running on "+node+"?")
		}
		return fd
	}

	if !podReady(pod) {
		return podNotReady(pod, fd, events, now)
	}
	fd.Stage, fd.Summary = StageDone, "running and ready on "+node
	return fd
}

func podDeletion(pod *corev1.Pod, f *Facts, fd Finding, events []corev1.Event, now time.Time) Finding {
	fd.Stage = StageDeletion
	node := pod.Spec.NodeName
	since := pod.DeletionTimestamp.Time
	grace := 30 * time.Second
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	fd.Summary = fmt.Sprintf("terminating since %s", ago(now, since))
	if node == "" {
		fd.Severity, fd.Owner = Info, "the hub"
		return fd
	}
	fd.Owner = "the agent on device " + node
	if n := f.node(node); n != nil {
		if ready, why := nodeReady(n, f, now); !ready {
			fd.Severity = Warning
			fd.Summary += fmt.Sprintf("; device %s is %s and must confirm the pod stopped before it goes", node, why)
			return fd
		}
	}
	if now.Sub(since) > grace+time.Minute {
		fd.Severity = Warning
		fd.Summary += fmt.Sprintf(", longer than its grace period (%s)", grace)
		if e := lastFrom(events, notScheduler); e != nil {
			fd.Details = append(fd.Details, "last event: "+eventLine(now, *e))
		}
		if len(pod.Finalizers) > 0 {
			fd.Details = append(fd.Details, "finalizers: "+strings.Join(pod.Finalizers, ", "))
		}
		return fd
	}
	fd.Severity = Info
	return fd
}

func podUnscheduled(pod *corev1.Pod, fd Finding, events []corev1.Event, now time.Time) Finding {
	fd.Stage, fd.Owner = StageScheduling, "the scheduler"
	fd.Severity = Warning
	var cond *corev1.PodCondition
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodScheduled {
			cond = &pod.Status.Conditions[i]
		}
	}
	switch {
	case cond != nil && cond.Reason == corev1.PodReasonSchedulingGated:
		fd.Severity = Info
		fd.Summary = "held back by scheduling gates: " + gateNames(pod)
		fd.Owner = "whoever set the scheduling gates"
		return fd
	case cond != nil && cond.Message != "":
		fd.Summary = "not scheduled: " + cond.Message
	default:
		fd.Summary = "not scheduled yet"
	}
	for _, e := range events {
		if e.Reason == "FailedScheduling" {
			if cond == nil || strings.TrimSpace(e.Message) != cond.Message {
				fd.Details = append(fd.Details, "last attempt: "+eventLine(now, e))
			} else {
				fd.Details = append(fd.Details, fmt.Sprintf("last attempt %s (seen %d times)", ago(now, LastSeen(e)), max(e.Count, 1)))
			}
			break
		}
	}
	if len(fd.Details) == 0 && (cond == nil || cond.Message == "") {
		fd.Details = append(fd.Details, fmt.Sprintf("no scheduling attempt recorded in %s: is the scheduler running?", ago(now, pod.CreationTimestamp.Time)))
	}
	if len(pod.Spec.NodeSelector) > 0 {
		fd.Details = append(fd.Details, "node selector: "+formatMap(pod.Spec.NodeSelector))
	}
	return fd
}

func gateNames(pod *corev1.Pod) string {
	var names []string
	for _, g := range pod.Spec.SchedulingGates {
		names = append(names, g.Name)
	}
	if len(names) == 0 {
		return "<none listed>"
	}
	return strings.Join(names, ", ")
}

type blocked struct {
	spec   corev1.Container
	status corev1.ContainerStatus
	init   bool
}

// firstBlocked finds the first container that is waiting or has
// terminated unsuccessfully.
func firstBlocked(pod *corev1.Pod) *blocked {
	check := func(specs []corev1.Container, statuses []corev1.ContainerStatus, init bool) *blocked {
		for _, st := range statuses {
			w, t := st.State.Waiting, st.State.Terminated
			stuck := (w != nil && w.Reason != "" && w.Reason != "PodInitializing" && w.Reason != "ContainerCreating") ||
				(t != nil && t.ExitCode != 0)
			if init && t != nil && t.ExitCode == 0 {
				continue
			}
			if stuck {
				b := &blocked{status: st, init: init}
				for _, s := range specs {
					if s.Name == st.Name {
						b.spec = s
					}
				}
				return b
			}
			if init && st.State.Running == nil {
				// An init container not done yet and not stuck: the agent
				// is still starting it; the main containers wait.
				return nil
			}
		}
		return nil
	}
	if b := check(pod.Spec.InitContainers, pod.Status.InitContainerStatuses, true); b != nil {
		return b
	}
	return check(pod.Spec.Containers, pod.Status.ContainerStatuses, false)
}

// ReasonImageSignature is the waiting reason the agent gives a container
// whose image's signature it refused (registry/trust.WaitingReason).
const ReasonImageSignature = "ErrImageSignature"

func containerBlocked(pod *corev1.Pod, b *blocked, fd Finding, events []corev1.Event, f *Facts, now time.Time) Finding {
	node := pod.Spec.NodeName
	name := b.status.Name
	what := "container " + name
	if b.init {
		what = "init container " + name
	}
	reason, message := "", ""
	if w := b.status.State.Waiting; w != nil {
		reason, message = w.Reason, w.Message
	} else if t := b.status.State.Terminated; t != nil {
		reason, message = t.Reason, t.Message
	}
	lower := strings.ToLower(reason + " " + message)
	fd.Severity = Critical

	switch {
	case reason == ReasonImageSignature:
		fd.Stage, fd.Owner = StageSignature, "the image signature check (trusted keys on "+node+")"
		fd.Summary = fmt.Sprintf("%s: image refused, its signature does not verify (%s)", what, reason)
		fd.Details = append(fd.Details, imageFacts(b)...)
	case strings.Contains(lower, "policy") || strings.Contains(lower, "not pinned") || strings.Contains(lower, "digest-pinned"):
		fd.Stage, fd.Owner = StagePolicy, "the image policy (pin the image by digest)"
		fd.Summary = fmt.Sprintf("%s: image refused by policy (%s)", what, reason)
		fd.Details = append(fd.Details, imageFacts(b)...)
	case imageReasons[reason]:
		fd.Stage, fd.Owner = StageImage, "the registry "+registryOf(b.spec.Image)
		fd.Summary = fmt.Sprintf("%s: image cannot be pulled (%s)", what, reason)
		fd.Details = append(fd.Details, imageFacts(b)...)
	case configReasons[reason]:
		fd.Stage, fd.Owner = StageConfig, "the pod's spec (as the agent on "+node+" found it)"
		fd.Summary = fmt.Sprintf("%s cannot be created (%s)", what, reason)
	default:
		return crashing(pod, b, what, fd, f, now)
	}
	if message != "" {
		fd.Details = append(fd.Details, "agent says: "+message)
	}
	if e := lastWarning(events); e != nil && (message == "" || !strings.Contains(e.Message, message)) {
		fd.Details = append(fd.Details, "last event: "+eventLine(now, *e))
	}
	return fd
}

// crashing covers containers that ran and stopped: CrashLoopBackOff, a
// non-zero exit, OOMKilled.
func crashing(pod *corev1.Pod, b *blocked, what string, fd Finding, f *Facts, now time.Time) Finding {
	st := b.status
	fd.Stage, fd.Owner = StageRunning, "the application ("+what+")"
	last := st.LastTerminationState.Terminated
	if t := st.State.Terminated; t != nil {
		last = t
	}
	word := printers.PodStatus(pod)
	if last == nil {
		fd.Summary = fmt.Sprintf("%s is %s", what, word)
	} else {
		fd.Summary = fmt.Sprintf("%s keeps stopping: last exit code %d", what, last.ExitCode)
		if last.Reason != "" {
			fd.Summary += " (" + last.Reason + ")"
		}
		if last.Reason == "OOMKilled" {
			lim := b.spec.Resources.Limits.Memory()
			if lim != nil && !lim.IsZero() {
				fd.Details = append(fd.Details, "killed for using more memory than its limit of "+lim.String())
			} else {
				fd.Details = append(fd.Details, "killed for running the device out of memory")
			}
		}
		if !last.FinishedAt.IsZero() {
			fd.Details = append(fd.Details, "last stopped "+ago(now, last.FinishedAt.Time))
		}
		if last.Message != "" {
			fd.Details = append(fd.Details, "termination message: "+strings.TrimSpace(last.Message))
		}
	}
	fd.Details = append(fd.Details, fmt.Sprintf("restarted %d times; status %s", st.RestartCount, word))
	if lines := f.PreviousLogs[LogKey(pod.Namespace, pod.Name, st.Name)]; len(lines) > 0 {
		fd.Details = append(fd.Details, "last log lines:")
		for _, l := range lines {
			fd.Details = append(fd.Details, "  | "+l)
		}
	}
	return fd
}

func imageFacts(b *blocked) []string {
	out := []string{"image: " + b.spec.Image}
	if i := strings.LastIndex(b.spec.Image, "@"); i >= 0 {
		out = append(out, "digest: "+b.spec.Image[i+1:])
	} else if b.spec.Image != "" {
		out = append(out, "digest: none (the image is not pinned by digest)")
	}
	if b.status.ImageID != "" {
		out = append(out, "resolved: "+b.status.ImageID)
	}
	return out
}

// registryOf names the registry host of an image reference the way the
// Docker convention reads it.
func registryOf(image string) string {
	if image == "" {
		return "(no image set)"
	}
	first, _, found := strings.Cut(image, "/")
	if found && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return first
	}
	return "docker.io"
}

func podNotReady(pod *corev1.Pod, fd Finding, events []corev1.Event, now time.Time) Finding {
	fd.Severity, fd.Stage = Warning, StageReadiness
	var notReady []string
	var probed bool
	for _, st := range pod.Status.ContainerStatuses {
		if !st.Ready {
			notReady = append(notReady, st.Name)
			for _, c := range pod.Spec.Containers {
				if c.Name == st.Name && c.ReadinessProbe != nil {
					probed = true
				}
			}
		}
	}
	if len(notReady) == 0 {
		// Every container is ready: a readiness gate holds the pod back.
		fd.Owner = "the controller of the readiness gates"
		var gates []string
		for _, g := range pod.Spec.ReadinessGates {
			gates = append(gates, string(g.ConditionType))
		}
		fd.Summary = "containers ready, readiness gates not: " + strings.Join(gates, ", ")
		return fd
	}
	fd.Owner = "the readiness probe of container " + strings.Join(notReady, ", ")
	fd.Summary = fmt.Sprintf("running on %s but not ready", pod.Spec.NodeName)
	for _, e := range events {
		if e.Reason == "Unhealthy" && strings.Contains(e.Message, "Readiness") {
			fd.Details = append(fd.Details, "last probe failure: "+eventLine(now, e))
			return fd
		}
	}
	if !probed {
		fd.Owner = "the agent on device " + pod.Spec.NodeName
		fd.Details = append(fd.Details, "no readiness probe: the agent has not reported the containers ready")
	} else {
		fd.Details = append(fd.Details, "no probe failure recorded yet: the probe has not passed since the container started")
	}
	return fd
}

func worstTerminated(pod *corev1.Pod) string {
	for _, st := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if t := st.State.Terminated; t != nil && t.ExitCode != 0 {
			return fmt.Sprintf("container %s exited with code %d (%s)", st.Name, t.ExitCode, t.Reason)
		}
	}
	return ""
}

func podReady(pod *corev1.Pod) bool {
	if c := podutil.Condition(&pod.Status, corev1.PodReady); c != nil {
		return c.Status == corev1.ConditionTrue
	}
	// Without a Ready condition, the containers say it.
	for _, st := range pod.Status.ContainerStatuses {
		if !st.Ready {
			return false
		}
	}
	return len(pod.Status.ContainerStatuses) > 0
}

func notScheduler(e corev1.Event) bool {
	return e.Reason != "FailedScheduling" && e.Reason != "Scheduled"
}

func lastFrom(events []corev1.Event, keep func(corev1.Event) bool) *corev1.Event {
	for i := range events {
		if keep(events[i]) {
			return &events[i]
		}
	}
	return nil
}

func lastWarning(events []corev1.Event) *corev1.Event {
	return lastFrom(events, func(e corev1.Event) bool { return e.Type == corev1.EventTypeWarning })
}

func formatMap(m map[string]string) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	sortStrings(parts)
	return strings.Join(parts, ",")
}
