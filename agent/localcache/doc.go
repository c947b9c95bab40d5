// Package localcache lets the agent's informers (Services, EndpointSlices
// and Nodes, which the service proxy, the cluster DNS and the pod routes
// read) start from the device's local store and keep it current.
//
// An informer's first list is answered from the store when it holds a
// whole list from an earlier run, so after a reboot without the hub the
// proxy programs its rules and the DNS answers at once; the watch that
// follows resumes from the stored resourceVersion, so a device that comes
// back costs the hub a watch, not a re-list (a 410 from the hub falls back
// to a real list). Every list from the hub rewrites the store, and every
// event is written through.
package localcache
