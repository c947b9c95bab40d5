package diagnose

import (
	"fmt"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"flotilla.dev/flotilla/api/v1alpha1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// Severity orders findings: the fleet view lists the worst first.
type Severity int

const (
	OK Severity = iota
	Info
	Warning
	Critical
)

func (s Severity) String() string {
	switch s {
	case OK:
		return "ok"
	case Info:
		return "info"
	case Warning:
		return "warning"
	}
	return "critical"
}

// Stages a workload goes through, in the order it goes through them.
const (
	StageSource     = "source"
	StageScheduling = "scheduling"
	StageDevice     = "device"
	StageStarting   = "starting"
	StageImage      = "image pull"
	StageSignature  = "image signature"
	StagePolicy     = "image policy"
	StageConfig     = "container config"
	StageRunning    = "application"
	StageReadiness  = "readiness"
	StageEndpoints  = "endpoints"
	StageRollout    = "rollout"
	StageDeletion   = "termination"
	StageDone       = "done"
)

// Finding is the diagnosis of one object.
type Finding struct {
	Severity Severity
	// Object is "kind/namespace/name" (or "kind/name" for cluster objects).
	Object string
	// Stage where the object is stuck (StageDone when it is not).
	Stage string
	// Owner is who can unstick it: a component, a device's agent, the
	// registry, the application.
	Owner string
	// Summary says in one line why.
	Summary string
	// Details are the facts behind the summary: events, exit codes, log
	// lines, counts.
	Details []string
}

// Healthy says whether there is nothing to look at.
func (f Finding) Healthy() bool { return f.Severity == OK }

// Facts is what is known around the diagnosed objects. Any field may be
// empty; the diagnosis then says less.
type Facts struct {
	Now            time.Time
	Events         []corev1.Event
	Nodes          []corev1.Node
	Leases         []coordinationv1.Lease
	Pods           []corev1.Pod
	EndpointSlices []discoveryv1.EndpointSlice
	// RolloutPolicies of the diagnosed workload's namespace.
	RolloutPolicies []*v1alpha1.RolloutPolicy
	// PreviousLogs holds the last lines of a container's previous instance,
	// keyed by LogKey.
	PreviousLogs map[string][]string
}

// LogKey keys Facts.PreviousLogs.
func LogKey(namespace, pod, container string) string {
	return namespace + "/" + pod + "/" + container
}

func (f *Facts) now() time.Time {
	if f.Now.IsZero() {
		return time.Now()
	}
	return f.Now
}

func (f *Facts) node(name string) *corev1.Node {
	for i := range f.Nodes {
		if f.Nodes[i].Name == name {
			return &f.Nodes[i]
		}
	}
	return nil
}

// EventsFor returns the events about one object, newest first.
func (f *Facts) EventsFor(kind, namespace, name string) []corev1.Event {
	var out []corev1.Event
	for _, e := range f.Events {
		io := e.InvolvedObject
		if io.Kind == kind && io.Name == name && (namespace == "" || io.Namespace == namespace || (io.Namespace == "" && e.Namespace == namespace)) {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return LastSeen(out[i]).After(LastSeen(out[j])) })
	return out
}

// LastSeen is when an event last happened, whichever API wrote it.
func LastSeen(e corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// EventSource names who reported an event.
func EventSource(e corev1.Event) string {
	comp, host := e.Source.Component, e.Source.Host
	if comp == "" {
		comp, host = e.ReportingController, e.ReportingInstance
	}
	if host != "" && host != comp {
		return comp + ", " + host
	}
	return comp
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return duration.HumanDuration(now.Sub(t)) + " ago"
}

func eventLine(now time.Time, e corev1.Event) string {
	s := fmt.Sprintf("%s %s %s: %s", ago(now, LastSeen(e)), e.Type, e.Reason, strings.TrimSpace(e.Message))
	if src := EventSource(e); src != "" {
		s += " (from " + src + ")"
	}
	return s
}

func objectName(kind, namespace, name string) string {
	if namespace == "" {
		return strings.ToLower(kind) + "/" + name
	}
	return strings.ToLower(kind) + "/" + namespace + "/" + name
}

// Sort orders findings worst first, then by stage (earliest first, since an
// early stage blocks the later ones), then by object.
func Sort(fs []Finding) {
	order := map[string]int{}
	for i, s := range []string{StageSource, StageDevice, StageScheduling, StageStarting, StageSignature, StagePolicy, StageImage,
		StageConfig, StageRunning, StageReadiness, StageEndpoints, StageRollout, StageDeletion, StageDone} {
		order[s] = i
	}
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if a.Severity != b.Severity {
			return a.Severity > b.Severity
		}
		if order[a.Stage] != order[b.Stage] {
			return order[a.Stage] < order[b.Stage]
		}
		return a.Object < b.Object
	})
}
