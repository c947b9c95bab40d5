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
package schedulerbench
