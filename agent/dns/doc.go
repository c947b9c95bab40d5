// Package dns owns the device's cluster DNS: a small server (miekg/dns) on
// the pod bridge address that answers `<service>.<namespace>.svc.<domain>`
// from the agent's informer caches and forwards every other name to the
// device's own resolvers. Because it answers from the caches, it keeps
// answering while the hub is unreachable.
//
// Names it answers (domain is cluster.local unless configured):
//
//	<svc>.<ns>.svc.<domain>            A: the ClusterIP; for a headless
//	                                   service the ready endpoints' IPs;
//	                                   CNAME for an ExternalName service
//	<host>.<svc>.<ns>.svc.<domain>     A: the endpoint with that hostname
//	                                   (StatefulSet-style pods)
//	_<port>._<proto>.<svc>.<ns>.svc... SRV: the named port
//	<a-b-c-d>.<ns>.pod.<domain>        A: a.b.c.d
//
// Anything else under the domain is NXDOMAIN; names outside it are
// forwarded. Pods find the server through the resolv.conf PodResolvConf
// renders (the kubelet writes it): search <ns>.svc.<domain> svc.<domain>
// <domain>, options ndots:5, so a bare service name resolves within the
// pod's namespace and "svc.ns" across namespaces.
//
// The listening sockets use IP_FREEBIND: the pod bridge and its address
// appear only when the first pod is attached, and the server must be
// there before it.
package dns
