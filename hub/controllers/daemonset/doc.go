// Package daemonset owns the DaemonSet loop: exactly one pod of each
// DaemonSet on every eligible node, which on an edge fleet is the everyday
// workload ("run this on every shop's device").
//
// As in Kubernetes: a node is eligible when it matches the template's
// nodeSelector and required node affinity and every NoSchedule/NoExecute
// taint is tolerated, counting the tolerations every DaemonSet pod gets
// (not-ready and unreachable NoExecute; disk-, memory-, pid-pressure and
// unschedulable NoSchedule; network-unavailable for host-network pods). A
// node whose taints no longer fit but whose NoExecute taints are tolerated
// keeps its pod. Pods are created unbound, pinned by required node affinity
// on metadata.name, so the scheduler binds them (Kubernetes' modern way)
// and the scheduler's resource checks apply.
//
// The template hash (the same stable hash Deployments use) is the
// controller-revision-hash label of each pod, which is how RollingUpdate
// (maxUnavailable, or maxSurge with replace-after-available) tells updated
// pods from old ones. OnDelete only creates updated pods where old ones
// were deleted. Every template is also a ControllerRevision named
// <daemonset>-<hash>, numbered, its data the template as a strategic merge
// patch, as kube-controller-manager writes them: kubectl rollout history
// and undo work on them unchanged, and a template that goes back to an
// earlier one renumbers that revision the newest. revisionHistoryLimit old
// revisions stay, and any a pod still runs.
//
// A DaemonSet a RolloutPolicy selects is staged (Options.Rollouts): only
// the devices of admitted waves get the current template; the others keep,
// or are given, the pods of the previous ControllerRevision, and the
// devices of a held wave keep whichever of the two they run. The rolling
// update's budget (maxUnavailable or maxSurge) applies as ever, counted
// against each device's own target revision.
package daemonset
