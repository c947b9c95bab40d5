// Package replicaset owns the ReplicaSet loop: it keeps spec.replicas pods
// matching a ReplicaSet's selector and writes the ReplicaSet's status.
//
// The loop follows Kubernetes' ReplicaSet controller: pods are created from
// the template with a controller ownerReference (slow-start batches, so a
// failing create costs one request rather than N), surplus pods are deleted
// in Kubernetes' order (unscheduled, then pending, then not ready, then
// doubled-up on a node, then most recently ready, most restarted, newest),
// orphans whose labels match are adopted and owned pods whose labels no
// longer match are released. Expectations remember the creations and
// deletions asked for until the informer has seen them, so a slow watch
// never causes a second round of creations.
//
// The mechanics it shares with the other loops (expectations, claiming,
// pods from a template, slow-start batches, routing pod events to their
// owner) are controllerutil's, and how a pod is judged (ready, available,
// active) is api/podutil's; what stays here is the ReplicaSet's own.
package replicaset
