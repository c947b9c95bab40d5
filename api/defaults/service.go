package defaults

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func service(svc *corev1.Service) {
	s := &svc.Spec
	if s.SessionAffinity == "" {
		s.SessionAffinity = corev1.ServiceAffinityNone
	}
	switch s.SessionAffinity {
	case corev1.ServiceAffinityNone:
		s.SessionAffinityConfig = nil
	case corev1.ServiceAffinityClientIP:
		if c := s.SessionAffinityConfig; c == nil || c.ClientIP == nil || c.ClientIP.TimeoutSeconds == nil {
			s.SessionAffinityConfig = &corev1.SessionAffinityConfig{
				ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(DefaultClientIPAffinity)},
			}
		}
	}
	if s.Type == "" {
		s.Type = corev1.ServiceTypeClusterIP
	}
	for i := range s.Ports {
		p := &s.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort == intstr.FromInt32(0) || p.TargetPort == intstr.FromString("") {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	if ExternallyAccessible(svc) && s.ExternalTrafficPolicy == "" {
		s.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
	if s.InternalTrafficPolicy == nil && s.Type != corev1.ServiceTypeExternalName {
		s.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyCluster)
	}
	if s.Type == corev1.ServiceTypeLoadBalancer && s.AllocateLoadBalancerNodePorts == nil {
		s.AllocateLoadBalancerNodePorts = ptr(true)
	}
	if s.Type == corev1.ServiceTypeExternalName {
		return
	}
	// clusterIP and clusterIPs are two views of one value in v1.
	if s.ClusterIP != "" && len(s.ClusterIPs) == 0 {
		s.ClusterIPs = []string{s.ClusterIP}
	}
	if s.ClusterIP == "" && len(s.ClusterIPs) > 0 {
		s.ClusterIP = s.ClusterIPs[0]
	}
	if len(s.IPFamilies) == 0 {
		// The hub's service range is IPv4; an address the client chose
		// decides the family.
		for _, ip := range s.ClusterIPs {
			s.IPFamilies = append(s.IPFamilies, familyOf(ip))
		}
		if len(s.IPFamilies) == 0 {
			s.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		}
	}
	if s.IPFamilyPolicy == nil {
		if len(s.IPFamilies) > 1 {
			s.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack)
		} else {
			s.IPFamilyPolicy = ptr(corev1.IPFamilyPolicySingleStack)
		}
	}
}

// familyOf is IPv6 for an IPv6 address and IPv4 otherwise ("None" and
// invalid values included: validation reports those).
func familyOf(ip string) corev1.IPFamily {
	if a, err := netip.ParseAddr(ip); err == nil && a.Is6() && !a.Is4In6() {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

// ExternallyAccessible reports whether traffic from outside the cluster
// reaches the Service: NodePort and LoadBalancer services, and ClusterIP
// services with external IPs.
func ExternallyAccessible(svc *corev1.Service) bool {
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		return true
	case corev1.ServiceTypeClusterIP, "":
		return len(svc.Spec.ExternalIPs) > 0
	}
	return false
}

// keepAllocated copies the cluster IPs and node ports the hub allocated
// for old into svc where svc leaves them empty and still needs them.
func keepAllocated(svc, old *corev1.Service) {
	needsIP := func(s *corev1.Service) bool { return s.Spec.Type != corev1.ServiceTypeExternalName }
	if needsIP(svc) && needsIP(old) && svc.Spec.ClusterIP == "" && len(svc.Spec.ClusterIPs) == 0 {
		svc.Spec.ClusterIP = old.Spec.ClusterIP
		svc.Spec.ClusterIPs = append([]string(nil), old.Spec.ClusterIPs...)
	}
	needsNodePort := func(s *corev1.Service) bool {
		switch s.Spec.Type {
		case corev1.ServiceTypeNodePort:
			return true
		case corev1.ServiceTypeLoadBalancer:
			return s.Spec.AllocateLoadBalancerNodePorts == nil || *s.Spec.AllocateLoadBalancerNodePorts
		}
		return false
	}
	if !needsNodePort(svc) || !needsNodePort(old) {
		return
	}
	// Ports are matched by name (a single port usually has none), and a
	// node port another port of svc already claims is not reused.
	taken := map[int32]bool{}
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 {
			taken[p.NodePort] = true
		}
	}
	byName := map[string]int32{}
	for _, p := range old.Spec.Ports {
		if p.NodePort != 0 {
			byName[p.Name] = p.NodePort
		}
	}
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if np, ok := byName[p.Name]; ok && p.NodePort == 0 && !taken[np] {
			p.NodePort = np
			taken[np] = true
		}
	}
	if svc.Spec.HealthCheckNodePort == 0 && svc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		svc.Spec.HealthCheckNodePort = old.Spec.HealthCheckNodePort
	}
}
