// Package hubclient is how the agent reaches the hub's API: typed clients
// of only the groups it uses (core, discovery and coordination, sharing
// one transport and one rate limiter) and a shared informer factory over
// them for the Services, EndpointSlices and Nodes that the proxy, the
// routes, the DNS server and the local cache all watch.
//
// It exists for the agent's footprint. client-go's Clientset links the
// typed client of every API group, and its informers package links the
// informers and listers of every group; on a device that only reads and
// writes a handful of kinds they were megabytes of binary, and resident
// pages, for nothing. Interface is a subset of kubernetes.Interface, so a
// Clientset (and the fake one tests use) still satisfies it wherever a
// caller has one.
package hubclient
