// Package schedulerbench measures the hub scheduler's throughput on a
// simulated fleet, for `make bench`.
//
// Run is end to end: informers over a fake clientset preloaded with the
// nodes and pending pods, the scheduling loop, and pods/binding calls that
// write the pod back into the fake store (which its watch then delivers
// to the informers, as the hub's would). RunAlgorithm is the placement
// alone (filter, score, assume) on the scheduler's Cache, without the
// API, so the two figures say how much of the cost is the algorithm and
// how much the binding path.
//
// RunAPI is what a user waits for: Node objects (and their Leases) are
// registered on a real hub whose controllers and scheduler run, then pods
// are created through its HTTPS API by 32 clients while a watcher waits
// until it has seen every one bound; two thirds of the workloads carry
// required anti-affinity per device or a DoNotSchedule spread over zones.
// See docs/scale.md, "Scheduling throughput", for the figures on this
// machine and where a pod's time goes.
package schedulerbench
