// Package agent assembles the device agent, as hub.Hub does for the hub:
// it obtains the hub credentials (Credentials), connects to containerd,
// and builds and runs the node (registration, status, lease), the HTTPS
// server on :10250 (logs for the hub), the service proxy, the pod routes
// between devices, the CNI network, the cluster DNS server and the
// kubelet, owning their lifetimes: Run starts them in order and stops them all when
// its context ends or one of them fails.
//
// # Order of start
//
//  1. Credentials: a rest.Config for the hub. Today from a kubeconfig
//     (KubeconfigCredentials); joining with a token replaces only this
//     step. The hub CA in it is also what the agent server trusts.
//  2. containerd, waited for with backoff (it may start after the agent at
//     boot), and its version for the Node's nodeInfo.
//  3. The agent server (so the Node can publish its port and certificate
//     pin), then the node loops, the service proxy and the pod routes
//     (sharing one set of informers with the DNS server).
//  4. The pod network once the pod CIDR is known: from the data dir's
//     pod-cidr file when the agent has run before (so a device that boots
//     without its hub still runs its pods), else from the hub's
//     Node.spec.podCIDR. Then the cluster DNS server on the pod bridge's
//     address (the CIDR's first host), which pods get as their
//     nameserver, and the kubelet.
//
// The Node reports Ready=False (with the reason) until the network is
// configured, and whenever containerd stops answering.
//
// If the hub assigns a pod CIDR different from the one remembered (the
// Node was deleted and registered again), Run writes the new one and
// returns ErrPodCIDRChanged: pods set up on the old network must not mix
// with the new one, and a restart (systemd restarts the agent; containers
// outlive it) applies it cleanly.
//
// The device serves its site's EndpointSlices (api.SiteSelector): the
// zone of its Node, as the hub has it or, without the hub, as last stored.
// When the Node moves to another site, Run returns ErrSiteChanged and the
// next Run serves the new one.
package agent
