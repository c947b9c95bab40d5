// Package netnstest builds small networks out of network namespaces for
// the integration tests and benchmarks of the proxy, routes and DNS: a
// namespace per device or pod, veth pairs, bridges. Nothing it does
// touches the host's own namespace beyond creating and deleting the
// namespaces (and the veth ends that move into them at once).
package netnstest
