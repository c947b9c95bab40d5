// Package routes owns pod traffic between devices (host-gateway routing):
// for every other Node with a spec.podCIDR it keeps a kernel route to that
// pod CIDR via the Node's InternalIP, and it removes the routes of Nodes
// that are gone. It also masquerades pod traffic leaving the pod network
// (nat chain FLOTILLA-EGRESS, jumped to from POSTROUTING) so that replies
// from the outside world find their way back, while pod-to-pod traffic
// between devices keeps the pods' own addresses; and it accepts forwarded
// pod traffic (filter chain FLOTILLA-POD-FORWARD) on hosts whose FORWARD
// policy is DROP, e.g. where Docker is installed.
//
// The routes are tagged with their own routing protocol number
// (RouteProtocol, 241), so the agent recognises them after a restart and
// never touches other routes.
//
// # The host-gateway limit, and what a site needs
//
// A host-gateway route says "to reach 10.42.2.0/24, send the packet to
// 192.168.1.12 on the local link": it only works when every device can
// reach every other device's InternalIP directly, in one hop, on the same
// L2 segment (the same switch or VLAN, or a Wi-Fi network that does not
// isolate clients). There is no encapsulation, so nothing is added to the
// packets and nothing is hidden from the network either. A site needs:
//
//   - all devices on one L2 segment; a Node whose InternalIP is not on a
//     directly connected network gets no route (the agent logs it), and
//     its pods are reachable from elsewhere only through NodePorts;
//   - the pod network (the hub's --cluster-cidr ranges, announced on each
//     Node: 10.42.0.0/16 and 10.64.0.0/10 by default) and the service network
//     (10.43.0.0/16) unused on the site's LAN, and the devices' firewall
//     (and the switch, if it filters) letting packets with those source
//     addresses pass between devices;
//   - IP forwarding on (the agent turns net.ipv4.ip_forward on);
//   - for pod traffic to other networks nothing else: it leaves with the
//     device's own address (masquerade).
//
// Devices spread over several segments or sites need an overlay (VXLAN,
// WireGuard) or routes to the pod CIDRs on the site's router; neither is
// this package's job.
package routes
