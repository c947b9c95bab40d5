package proxy

import (
	"net/netip"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// endpoint is one backend of a service port.
type endpoint struct {
	IP    string
	Port  int32
	Node  string
	Ready bool
	// Serving and Terminating follow EndpointConditions.
	Serving     bool
	Terminating bool
}

func (e endpoint) addr() string { return e.IP + ":" + strconv.Itoa(int(e.Port)) }

// servicePort is what the rules are made of: one port of one Service with
// the endpoints chosen for it.
type servicePort struct {
	Namespace, Name, PortName string
	Protocol                  corev1.Protocol
	ClusterIP                 string
	Port                      int32
	NodePort                  int32
	// AffinitySeconds > 0 means sessionAffinity ClientIP.
	AffinitySeconds int32
	// LocalOnly is externalTrafficPolicy Local for NodePorts.
	LocalOnly bool
	// Cluster are the endpoints ClusterIP traffic goes to; Local the
	// subset on this node, for Local-policy NodePorts.
	Cluster, Local []endpoint
	// HasEndpoints: some endpoint exists, usable or not.
	HasEndpoints bool
	// key orders service ports and names them in caches.
	key string
}

// String is "namespace/name:port", as kube-proxy names service ports.
func (s *servicePort) String() string {
	n := s.Namespace + "/" + s.Name
	if s.PortName != "" {
		n += ":" + s.PortName
	}
	return n
}

// buildModel turns Services and EndpointSlices into service ports, sorted
// by name so that output is deterministic.
func buildModel(nodeName string, services []*corev1.Service, slices []*discoveryv1.EndpointSlice) []*servicePort {
	bySvc := make(map[string][]*discoveryv1.EndpointSlice, len(services))
	for _, sl := range slices {
		if sl.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		name := sl.Labels[discoveryv1.LabelServiceName]
		if name == "" {
			continue
		}
		key := sl.Namespace + "/" + name
		bySvc[key] = append(bySvc[key], sl)
	}
	var out []*servicePort
	for _, svc := range services {
		if !proxied(svc) {
			continue
		}
		affinity := int32(0)
		if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
			affinity = corev1.DefaultClientIPServiceAffinitySeconds
			if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil && *c.ClientIP.TimeoutSeconds > 0 {
				affinity = *c.ClientIP.TimeoutSeconds
			}
		}
		localOnly := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
		svcSlices := bySvc[svc.Namespace+"/"+svc.Name]
		for _, p := range svc.Spec.Ports {
			if p.Protocol != corev1.ProtocolTCP && p.Protocol != corev1.ProtocolUDP && p.Protocol != "" {
				continue
			}
			proto := p.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			sp := &servicePort{
				Namespace: svc.Namespace, Name: svc.Name, PortName: p.Name,
				Protocol: proto, ClusterIP: svc.Spec.ClusterIP, Port: p.Port,
				AffinitySeconds: affinity, LocalOnly: localOnly,
			}
			if svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
				sp.NodePort = p.NodePort
			}
			all := endpointsFor(svcSlices, p.Name, proto)
			sp.HasEndpoints = len(all) > 0
			sp.Cluster = usable(all, func(endpoint) bool { return true })
			if sp.NodePort != 0 && localOnly {
				sp.Local = usable(all, func(e endpoint) bool { return e.Node == nodeName })
			}
			sp.key = sp.String() + "\x00" + string(proto)
			out = append(out, sp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// fingerprint covers everything the port's rules are made of: equal
// fingerprints render equal rules.
func (s *servicePort) fingerprint() string {
	var b strings.Builder
	b.Grow(64 + 24*(len(s.Cluster)+len(s.Local)))
	b.WriteString(s.key)
	for _, v := range []int32{s.Port, s.NodePort, s.AffinitySeconds} {
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(int(v)))
	}
	b.WriteByte(' ')
	b.WriteString(s.ClusterIP)
	if s.LocalOnly {
		b.WriteString(" local")
	}
	for _, e := range s.Cluster {
		b.WriteByte(' ')
		b.WriteString(e.addr())
	}
	b.WriteString(" |")
	for _, e := range s.Local {
		b.WriteByte(' ')
		b.WriteString(e.addr())
	}
	return b.String()
}

// proxied: services with a ClusterIP get rules; headless and ExternalName
// services are DNS only.
func proxied(svc *corev1.Service) bool {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return false
	}
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	return err == nil && ip.Is4()
}

// endpointsFor collects the endpoints of one service port from its slices,
// deduplicated by address (an endpoint may briefly sit in two slices).
func endpointsFor(slices []*discoveryv1.EndpointSlice, portName string, proto corev1.Protocol) []endpoint {
	seen := map[string]bool{}
	var out []endpoint
	for _, sl := range slices {
		port := int32(-1)
		for _, p := range sl.Ports {
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			pp := corev1.ProtocolTCP
			if p.Protocol != nil {
				pp = *p.Protocol
			}
			if name == portName && pp == proto && p.Port != nil {
				port = *p.Port
				break
			}
		}
		if port <= 0 {
			continue
		}
		for _, ep := range sl.Endpoints {
			if len(ep.Addresses) == 0 {
				continue
			}
			if _, err := netip.ParseAddr(ep.Addresses[0]); err != nil {
				continue
			}
			e := endpoint{IP: ep.Addresses[0], Port: port}
			if ep.NodeName != nil {
				e.Node = *ep.NodeName
			}
			// The API says: nil ready means ready, nil serving means as
			// ready, nil terminating means not terminating.
			e.Ready = ep.Conditions.Ready == nil || *ep.Conditions.Ready
			e.Serving = e.Ready
			if ep.Conditions.Serving != nil {
				e.Serving = *ep.Conditions.Serving
			}
			e.Terminating = ep.Conditions.Terminating != nil && *ep.Conditions.Terminating
			if seen[e.addr()] {
				continue
			}
			seen[e.addr()] = true
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr() < out[j].addr() })
	return out
}

// usable picks the ready endpoints among those keep accepts; if none is
// ready, the serving ones that are terminating, so that a rollout's last
// old pods still take connections until new ones are ready.
func usable(all []endpoint, keep func(endpoint) bool) []endpoint {
	var ready, terminating []endpoint
	for _, e := range all {
		if !keep(e) {
			continue
		}
		switch {
		case e.Ready && !e.Terminating:
			ready = append(ready, e)
		case e.Serving && e.Terminating:
			terminating = append(terminating, e)
		}
	}
	if len(ready) > 0 {
		return ready
	}
	return terminating
}
