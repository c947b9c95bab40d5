// Package proxy owns the device's Service rules: it watches Services and
// EndpointSlices and programs the kernel's iptables so that a ClusterIP or
// NodePort is translated (DNAT) to one ready endpoint per connection. The
// proxy is not in the packet path; once the rules are written the kernel
// forwards every packet on its own, with or without the agent.
//
// # Chains
//
// In the nat table FLOTILLA-SERVICES (jumped to from PREROUTING and OUTPUT)
// matches each ClusterIP:port and jumps to that service port's
// FLOTILLA-SVC-<hash> chain, which picks one FLOTILLA-SEP-<hash> endpoint
// chain with `statistic --mode random` probabilities 1/n, 1/(n-1), …, 1;
// the endpoint chain DNATs to podIP:targetPort. Its last rule sends
// packets addressed to a local address to FLOTILLA-NODEPORTS. Traffic that
// needs source NAT (from outside the pod network, NodePort traffic, a pod
// reaching itself through its own service) is marked by
// FLOTILLA-MARK-MASQ and masqueraded in FLOTILLA-POSTROUTING (jumped to from
// POSTROUTING); a ClusterIP's traffic is marked only when it comes from
// outside the pod network, which FLOTILLA-MASQ-OUTSIDE decides (one RETURN
// per pod range: the network may be several, as the hub announces them). NodePorts with externalTrafficPolicy Local go to a
// FLOTILLA-XLB-<hash> chain that only picks endpoints on this node.
//
// In the filter table FLOTILLA-SERVICES (OUTPUT and FORWARD) and
// FLOTILLA-EXTERNAL-SERVICES (INPUT) reject new connections to service
// ports that have no endpoints (TCP reset, ICMP port unreachable for UDP),
// so clients fail at once instead of timing out, and drop NodePort traffic
// of Local-policy services that have no endpoint here. FLOTILLA-FORWARD
// accepts forwarded service traffic where the FORWARD policy is DROP.
//
// # Syncing
//
// Informer events only mark the proxy dirty; one goroutine computes the
// whole desired rule set from the informer caches and writes the chains
// whose content changed, and deletes chains no longer wanted, with a single
// `iptables-restore --noflush` (one atomic transaction). Bursts of events
// are folded by a minimum interval between syncs. A full resync (at start
// and periodically) reads the kernel's tables with iptables-save and
// reconciles them, so rules changed behind the proxy's back are repaired
// and a restarted agent whose rules are already right writes nothing. The
// rules are rendered exactly as iptables-save prints them, which is what
// makes that comparison possible. Base chains and the jumps from the
// built-in chains are checked and created with go-iptables. Whether the
// system's iptables is the nf_tables or the legacy variant is detected from
// `iptables --version`, and the matching restore/save commands are used.
//
// UDP has no connection to close: when an endpoint of a UDP service goes,
// the conntrack entries that still point at it are deleted (conntrack CLI),
// and when a UDP service gets its first endpoint the entries created while
// it was rejecting are deleted too.
//
// Run does all of its kernel work on the calling goroutine (or in the
// network namespace of Config.NetNSPath), so tests and multi-device
// simulations can confine it to a namespace.
package proxy
