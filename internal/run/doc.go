// Package run runs the long-running parts of the daemons.
//
// Group starts named loops together and stops them all when one fails:
// the agent's parts (server, node, proxy, routes, pods, ...), the hub's
// (API server, PKI, HTTPS, node authorizer, its loops) and the controller
// manager's control loops are each one Group.
//
// Coalescer runs one function again whenever something changed, folding
// a burst of changes into one run and never running it twice at once:
// the service proxy's iptables sync and the pod routes' sync are each
// driven by one.
//
// Both follow the daemons' convention for long-running parts: a
// Run(ctx) error that works until ctx ends.
package run
