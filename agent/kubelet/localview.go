package kubelet

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"flotilla.dev/flotilla/api/podutil"
)

// LocalPod is one pod as the device itself sees it, for a technician on
// site who may have no hub to ask (`flotilla-agent pods`).
type LocalPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// Source is where the device got the pod: "hub", "cache" (the hub's
	// last word, kept on the device), "static", or "" for a pod no
	// source wants any more, which is being stopped.
	Source   string          `json:"source"`
	Phase    corev1.PodPhase `json:"phase,omitempty"`
	Ready    bool            `json:"ready"`
	Restarts int32           `json:"restarts"`
	// LastError is why the pod is not as wanted: a container's waiting
	// or failure reason, or the last failed step.
	LastError string `json:"lastError,omitempty"`
}

// LocalPods lists what the device runs and is asked to run.
func (k *Kubelet) LocalPods() []LocalPod {
	byUID := map[string]*LocalPod{}
	for uid, pod := range k.sources.list() {
		byUID[string(uid)] = &LocalPod{Namespace: pod.Namespace, Name: pod.Name, UID: string(uid), Source: k.sources.origin(uid)}
	}
	for _, uid := range k.workers.uids() {
		if _, ok := byUID[string(uid)]; !ok {
			byUID[string(uid)] = &LocalPod{UID: string(uid)}
		}
	}
	errs := k.workers.lastErrors()
	out := make([]LocalPod, 0, len(byUID))
	for _, lp := range byUID {
		if st, ok := k.status.Get(types.UID(lp.UID)); ok {
			lp.Phase = st.Phase
			lp.Ready = podutil.ConditionTrue(&st, corev1.PodReady)
			for _, cs := range append(st.InitContainerStatuses, st.ContainerStatuses...) {
				lp.Restarts += cs.RestartCount
				if lp.LastError == "" {
					lp.LastError = containerProblem(cs)
				}
			}
		}
		if e := errs[types.UID(lp.UID)]; e != "" {
			lp.LastError = e
		}
		out = append(out, *lp)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// containerProblem names what keeps a container from running well, ""
// when nothing does.
func containerProblem(cs corev1.ContainerStatus) string {
	switch {
	case cs.State.Waiting != nil && cs.State.Waiting.Reason != "ContainerCreating" && cs.State.Waiting.Reason != "PodInitializing":
		w := cs.State.Waiting
		return cs.Name + ": " + w.Reason + ": " + w.Message
	case cs.State.Terminated != nil && cs.State.Terminated.ExitCode != 0:
		t := cs.State.Terminated
		return cs.Name + ": " + t.Reason + ": " + t.Message
	}
	return ""
}
