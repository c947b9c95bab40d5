package node

import (
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Thresholds of the pressure conditions, Kubernetes' default hard eviction
// thresholds: they are also kept out of allocatable, as the kubelet does.
const (
	MemoryAvailableMin  = 100 << 20 // bytes
	DiskAvailablePct    = 10        // percent of the data dir's filesystem
	PIDsUsedMaxPct      = 90        // percent of pid_max
	DefaultMaxPods      = 110
	AnnotationAgentKeys = "node.flotilla.dev/agent-labels"
)

// Condition reasons, the kubelet's, so that tools reading them behave.
const (
	reasonReady        = "KubeletReady"
	reasonNotReady     = "KubeletNotReady"
	reasonMemOK        = "KubeletHasSufficientMemory"
	reasonMemPressure  = "KubeletHasInsufficientMemory"
	reasonDiskOK       = "KubeletHasNoDiskPressure"
	reasonDiskPressure = "KubeletHasDiskPressure"
	reasonPIDOK        = "KubeletHasSufficientPID"
	reasonPIDPressure  = "KubeletHasInsufficientPID"
)

// Capacity is what the machine has.
func Capacity(s Stats, maxPods int) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(s.CPUs), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(int64(s.MemoryTotal), resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(int64(s.DiskTotal), resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(int64(maxPods), resource.DecimalSI),
	}
}

// Allocatable is the capacity less the eviction thresholds: pods that fit
// into allocatable never push the machine into pressure by themselves.
func Allocatable(s Stats, maxPods int) corev1.ResourceList {
	mem := int64(s.MemoryTotal) - MemoryAvailableMin
	if mem < 0 {
		mem = 0
	}
	disk := int64(s.DiskTotal - s.DiskTotal*DiskAvailablePct/100)
	return corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(s.CPUs), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(mem, resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(disk, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(int64(maxPods), resource.DecimalSI),
	}
}

// Pressure says which of the pressure conditions hold.
type Pressure struct{ Memory, Disk, PID bool }

// PressureOf applies the thresholds to the machine's figures.
func PressureOf(s Stats) Pressure {
	return Pressure{
		Memory: s.MemoryAvailable < MemoryAvailableMin,
		Disk:   s.DiskTotal > 0 && s.DiskAvailable*100 < s.DiskTotal*DiskAvailablePct,
		PID:    s.PIDMax > 0 && s.Procs*100 > s.PIDMax*PIDsUsedMaxPct,
	}
}

// Conditions are the four conditions the agent owns. readyErr, when not
// nil, is why the node cannot run pods.
func Conditions(p Pressure, readyErr error) []corev1.NodeCondition {
	cond := func(t corev1.NodeConditionType, on bool, yes, no, msgYes, msgNo string) corev1.NodeCondition {
		if on {
			return corev1.NodeCondition{Type: t, Status: corev1.ConditionTrue, Reason: yes, Message: msgYes}
		}
		return corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse, Reason: no, Message: msgNo}
	}
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: reasonReady, Message: "agent is posting ready status"}
	if readyErr != nil {
		ready = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: reasonNotReady, Message: readyErr.Error()}
	}
	return []corev1.NodeCondition{
		cond(corev1.NodeMemoryPressure, p.Memory, reasonMemPressure, reasonMemOK,
			"agent has memory pressure: less than 100Mi available", "agent has sufficient memory available"),
		cond(corev1.NodeDiskPressure, p.Disk, reasonDiskPressure, reasonDiskOK,
			"agent has disk pressure: less than 10% of the data dir's filesystem available", "agent has no disk pressure"),
		cond(corev1.NodePIDPressure, p.PID, reasonPIDPressure, reasonPIDOK,
			"agent has PID pressure: more than 90% of pid_max in use", "agent has sufficient PID available"),
		ready,
	}
}

// mergeConditions puts want into cur: a condition keeps its transition
// time while its status stays, every written one gets now as heartbeat,
// and conditions of other types (written by others) stay as they are.
func mergeConditions(cur []corev1.NodeCondition, want []corev1.NodeCondition, now metav1.Time) []corev1.NodeCondition {
	out := make([]corev1.NodeCondition, 0, len(cur)+len(want))
	owned := map[corev1.NodeConditionType]bool{}
	for _, w := range want {
		owned[w.Type] = true
	}
	for _, c := range cur {
		if !owned[c.Type] {
			out = append(out, c)
		}
	}
	for _, w := range want {
		w.LastHeartbeatTime = now
		w.LastTransitionTime = now
		for _, c := range cur {
			if c.Type == w.Type && c.Status == w.Status && !c.LastTransitionTime.IsZero() {
				w.LastTransitionTime = c.LastTransitionTime
			}
		}
		out = append(out, w)
	}
	return out
}

// conditionsDiffer compares the owned conditions by status, reason and
// message (times aside).
func conditionsDiffer(cur []corev1.NodeCondition, want []corev1.NodeCondition) bool {
	for _, w := range want {
		found := false
		for _, c := range cur {
			if c.Type == w.Type {
				found = true
				if c.Status != w.Status || c.Reason != w.Reason || c.Message != w.Message {
					return true
				}
			}
		}
		if !found {
			return true
		}
	}
	return false
}

func resourcesDiffer(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return true
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || v.Cmp(w) != 0 {
			return true
		}
	}
	return false
}

func addressesDiffer(a, b []corev1.NodeAddress) bool {
	if len(a) != len(b) {
		return true
	}
	for i := range a {
		if a[i] != b[i] {
			return true
		}
	}
	return false
}

// heartbeat is the Ready condition's last heartbeat in the status.
func heartbeat(st *corev1.NodeStatus) time.Time {
	for _, c := range st.Conditions {
		if c.Type == corev1.NodeReady {
			return c.LastHeartbeatTime.Time
		}
	}
	return time.Time{}
}

// desiredStatus is cur with every field the agent owns set to what it
// observed. It reports whether anything the agent owns differs (times
// aside).
func desiredStatus(cur corev1.NodeStatus, o observation, now metav1.Time) (corev1.NodeStatus, bool) {
	want := Conditions(PressureOf(o.stats), o.readyErr)
	changed := conditionsDiffer(cur.Conditions, want) ||
		resourcesDiffer(cur.Capacity, o.capacity) ||
		resourcesDiffer(cur.Allocatable, o.allocatable) ||
		addressesDiffer(cur.Addresses, o.addresses) ||
		cur.NodeInfo != o.nodeInfo ||
		cur.DaemonEndpoints.KubeletEndpoint.Port != o.port
	st := *cur.DeepCopy()
	st.Conditions = mergeConditions(cur.Conditions, want, now)
	st.Capacity = o.capacity
	st.Allocatable = o.allocatable
	st.Addresses = o.addresses
	st.NodeInfo = o.nodeInfo
	st.DaemonEndpoints.KubeletEndpoint.Port = o.port
	return st, changed
}

// observation is everything the status is computed from.
type observation struct {
	stats       Stats
	readyErr    error
	capacity    corev1.ResourceList
	allocatable corev1.ResourceList
	addresses   []corev1.NodeAddress
	nodeInfo    corev1.NodeSystemInfo
	port        int32
}

// mergeMeta sets the labels and annotations the agent owns on node and
// removes the configured labels it set before that are no longer
// configured (their keys are kept in AnnotationAgentKeys). configured are
// the labels from the agent's config, fixed the ones it always sets.
// It reports whether node changed.
func mergeMeta(node *corev1.Node, fixed, configured, annotations map[string]string) bool {
	changed := false
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	for _, k := range strings.Split(node.Annotations[AnnotationAgentKeys], ",") {
		if k == "" {
			continue
		}
		if _, still := configured[k]; still {
			continue
		}
		if _, isFixed := fixed[k]; isFixed {
			continue
		}
		if _, ok := node.Labels[k]; ok {
			delete(node.Labels, k)
			changed = true
		}
	}
	set := func(m map[string]string, k, v string) {
		if cur, ok := m[k]; !ok || cur != v {
			m[k] = v
			changed = true
		}
	}
	for k, v := range configured {
		set(node.Labels, k, v)
	}
	for k, v := range fixed {
		set(node.Labels, k, v)
	}
	keys := make([]string, 0, len(configured))
	for k := range configured {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) > 0 {
		set(node.Annotations, AnnotationAgentKeys, strings.Join(keys, ","))
	} else if _, ok := node.Annotations[AnnotationAgentKeys]; ok {
		delete(node.Annotations, AnnotationAgentKeys)
		changed = true
	}
	for k, v := range annotations {
		set(node.Annotations, k, v)
	}
	return changed
}
