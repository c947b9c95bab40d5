package api

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// ParseClusterCIDRs reads a comma-separated list of IPv4 pod ranges (the
// hub's --cluster-cidr, a Node's AnnotationClusterCIDRs), refusing
// overlaps among them and with ServiceCIDR.
func ParseClusterCIDRs(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	svc := netip.MustParsePrefix(ServiceCIDR)
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("cluster CIDR %q: %w", f, err)
		}
		if !p.Addr().Is4() {
			return nil, fmt.Errorf("cluster CIDR %q: only IPv4 is supported", f)
		}
		if p.Masked() != p {
			return nil, fmt.Errorf("cluster CIDR %q has host bits set; did you mean %s?", f, p.Masked())
		}
		if p.Overlaps(svc) {
			return nil, fmt.Errorf("cluster CIDR %s overlaps the service range %s: pod and service addresses must differ", p, svc)
		}
		for _, q := range out {
			if p.Overlaps(q) {
				return nil, fmt.Errorf("cluster CIDRs %s and %s overlap", q, p)
			}
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no cluster CIDR in %q: give IPv4 ranges such as %s", list, ClusterCIDRs)
	}
	return out, nil
}

// JoinCIDRs writes ranges as ParseClusterCIDRs reads them.
func JoinCIDRs(ranges []netip.Prefix) string {
	parts := make([]string, len(ranges))
	for i, p := range ranges {
		parts[i] = p.String()
	}
	return strings.Join(parts, ",")
}

// PodNetworkOf is the pod network a device takes from its Node: the
// ranges the hub announced (AnnotationClusterCIDRs), or fallback when it
// announced none (a hub from before, which used ClusterCIDR only) or the
// Node is not known yet. An announcement it cannot read gives fallback and
// the error, for the device to log.
func PodNetworkOf(node *corev1.Node, fallback []string) ([]string, error) {
	v, ok := "", false
	if node != nil {
		v, ok = node.Annotations[AnnotationClusterCIDRs]
	}
	if !ok {
		return fallback, nil
	}
	r, err := ParseClusterCIDRs(v)
	if err != nil {
		return fallback, fmt.Errorf("node %s: annotation %s: %w", node.Name, AnnotationClusterCIDRs, err)
	}
	out := make([]string, len(r))
	for i, p := range r {
		out[i] = p.String()
	}
	return out, nil
}
