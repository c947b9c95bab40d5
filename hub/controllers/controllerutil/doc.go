// Package controllerutil owns what the hub's controllers share beyond the
// work loop itself (that is internal/controlloop's): the mechanics
// Kubernetes' controllers share, written once so that the ReplicaSet,
// Deployment, DaemonSet and EndpointSlice loops cannot drift apart.
//
// LeaderElection / RunElected wrap a Run function with client-go's
// leaderelection on a coordination.k8s.io Lease (by default in
// flotilla-system), so that several hubs can run and only one runs each
// loop. Disabled, RunElected simply calls run(ctx). On losing the lease the
// loop's context is cancelled, the loop is waited for, and ErrLeaderLost is
// returned; the caller decides (the hub exits, as Kubernetes' components
// do, since its caches may be stale).
package controllerutil
