// Package manager owns the hub's controller manager: one set of shared
// informers and every control loop (Deployment, ReplicaSet, DaemonSet,
// EndpointSlice, garbage collector, node lifecycle) plus the scheduler,
// started together under one leader-election Lease, as
// kube-controller-manager does.
package manager
