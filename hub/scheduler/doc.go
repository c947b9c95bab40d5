// Package scheduler owns pod placement: it watches pods with an empty
// spec.nodeName and binds each to a node through pods/binding.
//
// The Cache holds every node with the sums of what its bound pods request,
// their host ports and per-workload counts, precomputed so that checking a
// node costs a few comparisons and no allocation. A placement is assumed in
// the Cache the moment it is chosen (the next pod sees it) and forgotten if
// the binding fails. Filters, in kube-scheduler's order: the node is not
// unschedulable (unless tolerated), every NoSchedule/NoExecute taint is
// tolerated, the node is Ready, nodeSelector and required node affinity
// match, host ports are free, and cpu, memory, ephemeral-storage and the
// pod count fit in allocatable minus what is bound, then (only for pods
// that have them, or that existing pods' anti-affinity names) the rules
// about other pods: topology spread constraints (DoNotSchedule, with
// minDomains, matchLabelKeys and the node inclusion policies), required
// pod affinity and anti-affinity, and existing pods' required
// anti-affinity. A namespaceSelector in a pod (anti-)affinity term is
// taken as every namespace. Like kube-scheduler,
// a scan stops once enough feasible nodes are found
// (PercentageOfNodesToScore) and the next scan starts where it stopped.
// Scores: least allocated, plus spreading a workload's pods (same
// controller, or same labels) over nodes and over the topology label,
// plus preferred node affinity, preferred pod (anti-)affinity and
// ScheduleAnyway spreading, each normalized over the feasible nodes.
// Pods are taken highest spec.priority first and, among equals, in the
// order they were queued (kube-scheduler's PrioritySort); the API server
// resolved the priority from the pod's PriorityClass. Preemption is not
// implemented: a high-priority pod that fits nowhere waits like any other.
//
// A pod that fits nowhere gets PodScheduled=False (Unschedulable) and a
// FailedScheduling event worded as kube-scheduler words it ("0/5 nodes
// are available: 3 Insufficient memory, 2 node(s) had untolerated taint
// {node.kubernetes.io/unreachable: }."), and waits until a node or a bound
// pod changes (or UnschedulableTimeout passes), then retries with per-pod
// exponential backoff.
package scheduler
