package cni

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// ReleaseStaleRange makes way for a new pod CIDR: a device that joins
// again (a new identity, a hub restored from a backup) can be given
// another range while Flotilla's bridge still carries the old gateway
// address, and the bridge plugin then refuses every pod ("already has an
// IP address different from ..."). The agent owns that bridge, so it
// deletes it (the plugin makes it again with the new address); pods still
// on the old range get new sandboxes from the kubelet, whose CNI DEL
// releases their old reservations (host-local releases by pod, whatever
// the range). It reports whether it moved anything. Run it in the pod
// network's namespace, before pods start.
func ReleaseStaleRange(cfg Config, podCIDR string) (bool, error) {
	cfg = cfg.withDefaults()
	_, want, err := net.ParseCIDR(podCIDR)
	if err != nil {
		return false, fmt.Errorf("pod CIDR %q: %w", podCIDR, err)
	}
	moved := false
	link, err := netlink.LinkByName(cfg.BridgeName)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
	case err != nil:
		return false, fmt.Errorf("looking at bridge %s: %w", cfg.BridgeName, err)
	default:
		addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
		if err != nil {
			return false, fmt.Errorf("addresses of bridge %s: %w", cfg.BridgeName, err)
		}
		stale := false
		for _, a := range addrs {
			if !want.Contains(a.IP) {
				stale = true
			}
		}
		if stale {
			if err := netlink.LinkDel(link); err != nil {
				return false, fmt.Errorf("removing bridge %s, which carries an address outside the pod CIDR %s: %w", cfg.BridgeName, podCIDR, err)
			}
			moved = true
		}
	}
	return moved, nil
}
