// Package podutil owns the judgements made of a pod from its object alone
// — is it ready, available, active, finished, a mirror — so that every
// reader of a pod answers them alike: the controllers counting replicas,
// the scheduler deciding what holds a node, the printers and flotctl
// showing status, the agent's local view. Kubernetes' meaning is kept
// (for example, available is "Ready for minReadySeconds"), since kubectl
// and users read the same fields with that meaning.
//
// It depends only on the API types, so that the CLI can use it without
// linking the hub.
package podutil
