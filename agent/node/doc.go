// Package node owns the device's Node object on the hub: it registers the
// Node (labels, addresses, capacity, nodeInfo), keeps its status
// conditions current (Ready, MemoryPressure, DiskPressure, PIDPressure),
// renews its Lease in kube-node-lease, and tells the agent the pod CIDR the
// hub assigned.
//
// # Writes
//
// The status is computed every StatusInterval (10 s) and written only when
// it differs from what the hub holds, or when the Ready heartbeat is older
// than HeartbeatInterval (5 min): liveness is the Lease's job, renewed every
// LeaseInterval (10 s) with a duration of 40 s, which costs the hub one small
// write instead of a whole Node. What the hub holds is read from a watch on
// this one Node, so a status changed by someone else (the hub marking the
// node Unknown after an outage) is corrected on the next tick.
//
// # Ownership
//
// The agent owns the labels it sets (kubernetes.io/hostname, arch, os and
// the configured ones) and the annotations it sets; it remembers the keys of
// the configured labels in the node.flotilla.dev/agent-labels annotation so
// that a label dropped from the config is removed, while labels and taints
// set by anybody else are never touched. In the status it owns capacity,
// allocatable, addresses, nodeInfo, daemonEndpoints and its four
// conditions; other conditions are kept.
//
// # Outages
//
// Registration, status writes and Lease renewals retry with backoff and
// never give up: a device outlives any number of hub outages. A Node
// deleted on the hub is registered again.
package node
