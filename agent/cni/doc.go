// Package cni owns pod networking on a device: the default network
// configuration (bridge "flotilla0" with host-local IPAM from the node's
// pod CIDR, portmap for hostPorts), written only when the CNI conf dir has
// none of its own, and attaching and detaching pod network namespaces with
// libcni and the standard plugins.
//
// libcni caches each attachment's result and runtime config (port
// mappings) under CacheDir, which lives on disk, so a restarted agent can
// tear down a pod it set up before the restart.
package cni
