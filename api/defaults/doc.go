// Package defaults fills in the fields a client may leave empty, with the
// values Kubernetes' apiserver gives them, for every kind the hub serves.
//
// It owns what k8s.io/kubernetes spreads over pkg/apis/*/v1/defaults.go, the
// generated defaulters, the v1 conversions that normalise an object (a
// Secret's stringData, a Node's podCIDR/podCIDRs, a Service's
// clusterIP/clusterIPs) and the DefaultTolerationSeconds admission plugin,
// so that an object read back from the hub looks as it would from
// Kubernetes and controllers, the scheduler and the agents never have to
// guess a default themselves.
//
// Default runs on every create and update of the main resource, before
// validation; DefaultUpdate additionally keeps values that the hub allocated
// (a Service's cluster IP and node ports) when an update, such as a PUT of a
// manifest from Git, leaves them empty. Both are idempotent.
package defaults
