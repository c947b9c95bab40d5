// Package status owns writing pod statuses to the hub for the agent: the
// pod workers Set the status they computed, and the Manager writes it with
// UpdateStatus from its own deduplicating, rate-limited work queue keyed
// by pod UID, only when it differs from what the hub has. Failed writes
// (the hub unreachable, a conflict) are retried with backoff, and only
// the latest status of a pod is ever sent, so a device that was offline
// catches up with one write per pod on reconnect.
//
// The kubelet owns the pod's status except conditions it does not know
// (set by other components); those are kept from the object on the hub.
// A status that reached a terminal phase (Succeeded, Failed) on the hub is
// never moved back, as in Kubernetes.
package status
