// Package auth owns who may do what on the hub: the roles (admin, viewer,
// node), the Node authorizer that lets a device reach only what its own
// pods need, and the NodeRestriction admission that checks, object by
// object, the writes a device makes (its own Node without changing the
// labels and taints that decide its workloads, its own Lease, the status
// and deletion of its own pods with addresses from its own pod CIDR or
// host, mirror pods of its static pods that no controller can take for its
// own, Events about its own Node and pods).
//
// The authorizer decides from the request alone plus a graph of which pods
// are bound to which node and which Secrets and ConfigMaps they reference
// (Graph, fed by a watch of pods through the hub's own API). Admission sees
// the stored object, so it is the authoritative check where the graph could
// lag a moment behind; it reads the objects it judges a write against (the
// device's Node, the pod an Event is about) through apiserver.LookupFrom.
//
// Revocation is by user and time, not by certificate: a Revocation refuses
// every certificate of its user issued before it, so neither the hub nor
// the admin has to know which certificates exist, and whoever joins or is
// issued a kubeconfig afterwards is unaffected. Deleting a Node revokes its
// device (NodeRevoker, before the Node is gone); revocations live as
// ConfigMaps in the store, so that every hub of the fleet watches them.
package auth
