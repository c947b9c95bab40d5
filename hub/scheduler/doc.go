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
// resolved the priority from the pod's PriorityClass. The queue is
// client-go's rate-limited workqueue over a priority heap, so a pod is
// queued once, held while it is being placed and retried with per-pod
// backoff as every controller's key is.
//
// A pod that fits nowhere may preempt, as kube-scheduler's
// DefaultPreemption (Preempt): unless its preemptionPolicy is Never, on
// each node only other pods keep it from, a dry run removes every pod of
// lower priority and puts back as many as still let it fit, highest
// priority first; the node with the lowest highest-victim priority, then
// the lowest priority sum, then the fewest victims wins. The pod gets
// status.nominatedNodeName, the victims DisruptionTarget=True
// (PreemptionByScheduler), a graceful delete and a Preempted event, and
// the pod is bound on a later attempt once they are gone. While it waits,
// pods of lower priority are placed as if it were already on that node.
// PodDisruptionBudgets are not consulted: the hub does not serve
// policy/v1. Lower-priority pods nominated to the same node keep their
// nomination (kube-scheduler clears it).
//
// A Placement (Config.Placement; the staged rollouts' DeploymentGate)
// narrows where a pod may go beyond its own spec: the pod is scheduled,
// and preemption searches, as a copy with a required node affinity term
// on metadata.name, so a Deployment's new template lands only on the
// devices of the waves a RolloutPolicy has admitted. Nothing of the copy
// is written back.
//
// A filter is added in three places, in the same order: nodeInfo.fits
// (the hot path, no allocation), nodeInfo.failureReasons (the same check
// with its kube-scheduler-worded reason) and, when evicting pods cannot
// change its answer, nodeInfo.staticFits, which tells preemption to skip
// the node.
//
// A pod that fits nowhere gets PodScheduled=False (Unschedulable) and a
// FailedScheduling event worded as kube-scheduler words it ("0/5 nodes
// are available: 3 Insufficient memory, 2 node(s) had untolerated taint
// {node.kubernetes.io/unreachable: }. preemption: 0/5 nodes are
// available: 2 Preemption is not helpful for scheduling, 3 No preemption
// victims found for incoming pod."), and waits until a node or a bound
// pod changes (or UnschedulableTimeout passes), then retries with per-pod
// exponential backoff.
package scheduler
