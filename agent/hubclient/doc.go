// Package hubclient is how the agent reaches the hub's API: clients of
// only the kinds it uses (in core, discovery and coordination, sharing one
// transport and one rate limiter), over a scheme of only those groups,
// and a shared informer factory over them for the Services,
// EndpointSlices and Nodes that the proxy, the routes, the DNS server and
// the local cache all watch.
//
// It exists for the agent's footprint. client-go's Clientset links the
// typed client of every API group, its informers package links the
// informers and listers of every group, and even one of its typed clients
// registers every group's types in client-go's scheme; on a device that
// only reads and writes a handful of kinds they were megabytes of binary,
// and resident pages, for nothing. The clients have client-go's typed
// clients' signatures, so fromclientset adapts a Clientset (or the fake
// one tests use) to Interface.
package hubclient
