// Package simdevice simulates Flotilla devices for tests and benchmarks: a
// Device registers its Node, renews its Lease in kube-node-lease, and plays
// the agent for the pods bound to it (Running and Ready after a delay, with
// an address from the node's pod CIDR; a deleted pod is confirmed gone). It
// runs no containers: it exercises the hub's loops, not the agent.
package simdevice
