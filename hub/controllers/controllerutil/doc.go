// Package controllerutil owns what the hub's controllers share beyond the
// work loop itself (that is internal/controlloop's): the mechanics of
// Kubernetes' controllers, written once so that the ReplicaSet,
// Deployment, DaemonSet and EndpointSlice loops cannot drift apart, and no
// loop has to import another to reuse them.
//
//   - Expectations: the creations and deletions a loop asked for and its
//     cache has not shown yet. Until they are seen (or ExpectationsTimeout
//     passes) the loop must not count again, or a slow watch would make it
//     create twice.
//   - Claimer: which objects an owner controls: matching orphans are
//     adopted, owned objects that no longer match are released, mirror pods
//     are never touched (a device's static pod is no controller's replica).
//   - OwnerEvents: the informer handler of an owned kind, waking the owner
//     its controllerRef names (if still the same object, by UID), every
//     owner that may adopt an orphan, and the previous owner when the
//     controllerRef changes, and telling Expectations what it saw.
//   - PodFromTemplate, SlowStartBatch and ComputeHash: a controller's pod
//     from its template; creations in batches of 1, 2, 4, ... so that a
//     failing create costs one request rather than N; the hash that names
//     a template's revision the same on every hub.
//   - LeaderElection / RunElected: a Run function wrapped in client-go's
//     leaderelection on a coordination.k8s.io Lease (by default in
//     flotilla-system), so that several hubs can run and only one runs each
//     loop. Disabled, RunElected simply calls run(ctx). On losing the lease
//     the loop's context is cancelled, the loop is waited for, and
//     ErrLeaderLost is returned. RunCandidate, which the hub uses, then
//     stands again: unlike Kubernetes' controller manager, a hub that
//     exited would take its API away from its devices too, and a loop
//     that leads again starts afresh, its caches listed anew.
//
// How a pod is judged (ready, available, active, mirror) is not here but
// in api/podutil, because flotctl and the agent judge pods too.
package controllerutil
