package validation

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/defaults"
)

var (
	supportedServiceTypes = []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeExternalName, corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort}
	supportedAffinity     = []corev1.ServiceAffinity{corev1.ServiceAffinityClientIP, corev1.ServiceAffinityNone}
	supportedExtPolicy    = []corev1.ServiceExternalTrafficPolicy{corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal}
	supportedIntPolicy    = []corev1.ServiceInternalTrafficPolicy{corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal}
	supportedIPFamilies   = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	supportedFamilyPolicy = []corev1.IPFamilyPolicy{corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack}
)

const maxClientIPTimeout = 86400

func validateService(svc *corev1.Service, opts Options) field.ErrorList {
	errs := objectMeta(&svc.ObjectMeta, true, nameIsDNS1035Label)
	return append(errs, validateServiceSpec(svc, opts)...)
}

func validateServiceSpec(svc *corev1.Service, opts Options) field.ErrorList {
	var errs field.ErrorList
	s := &svc.Spec
	tp := specPath.Child("type")
	switch {
	case s.Type == "":
		errs = append(errs, field.Required(tp, ""))
	case !oneOf(s.Type, supportedServiceTypes...):
		errs = append(errs, field.NotSupported(tp, s.Type, supportedServiceTypes))
	}
	external := s.Type == corev1.ServiceTypeExternalName
	headless := s.ClusterIP == corev1.ClusterIPNone
	if external {
		ep := specPath.Child("externalName")
		if s.ExternalName == "" {
			errs = append(errs, field.Required(ep, ""))
		} else {
			errs = appendMsgs(errs, ep, s.ExternalName, utilvalidation.IsDNS1123Subdomain(trimDot(s.ExternalName)))
		}
		if s.ClusterIP != "" {
			errs = append(errs, field.Forbidden(specPath.Child("clusterIP"), "may not be set for ExternalName services"))
		}
		if len(s.IPFamilies) > 0 {
			errs = append(errs, field.Forbidden(specPath.Child("ipFamilies"), "may not be set for ExternalName services"))
		}
		if s.IPFamilyPolicy != nil {
			errs = append(errs, field.Forbidden(specPath.Child("ipFamilyPolicy"), "may not be set for ExternalName services"))
		}
	} else {
		errs = append(errs, validateClusterIPs(s, opts)...)
	}
	if len(s.Ports) == 0 && !external && !headless {
		errs = append(errs, field.Required(specPath.Child("ports"), ""))
	}
	errs = append(errs, validateServicePorts(svc, opts)...)
	if _, err := api.ServiceTopology(svc); err != nil {
		errs = append(errs, field.NotSupported(metaPath.Child("annotations").Key(api.AnnotationServiceTopology),
			svc.Annotations[api.AnnotationServiceTopology], []string{api.ServiceTopologySite, api.ServiceTopologyFleet}))
	}

	errs = append(errs, metav1validation.ValidateLabels(s.Selector, specPath.Child("selector"))...)
	for i, ip := range s.ExternalIPs {
		if _, err := netip.ParseAddr(ip); err != nil {
			errs = append(errs, field.Invalid(specPath.Child("externalIPs").Index(i), ip, "must be a valid IP address"))
		}
	}

	ap := specPath.Child("sessionAffinity")
	switch {
	case s.SessionAffinity == "":
		errs = append(errs, field.Required(ap, ""))
	case !oneOf(s.SessionAffinity, supportedAffinity...):
		errs = append(errs, field.NotSupported(ap, s.SessionAffinity, supportedAffinity))
	case s.SessionAffinity == corev1.ServiceAffinityClientIP:
		cp := specPath.Child("sessionAffinityConfig", "clientIP", "timeoutSeconds")
		if c := s.SessionAffinityConfig; c == nil || c.ClientIP == nil || c.ClientIP.TimeoutSeconds == nil {
			errs = append(errs, field.Required(cp, "when session affinity type is ClientIP"))
		} else if t := *c.ClientIP.TimeoutSeconds; t <= 0 || t > maxClientIPTimeout {
			errs = append(errs, field.Invalid(cp, t, fmt.Sprintf("must be greater than 0 and less than %d", maxClientIPTimeout)))
		}
	case s.SessionAffinityConfig != nil:
		errs = append(errs, field.Invalid(specPath.Child("sessionAffinityConfig"), s.SessionAffinityConfig, "must not be set when session affinity is None"))
	}

	xp := specPath.Child("externalTrafficPolicy")
	if defaults.ExternallyAccessible(svc) {
		if !oneOf(s.ExternalTrafficPolicy, supportedExtPolicy...) {
			errs = append(errs, field.NotSupported(xp, s.ExternalTrafficPolicy, supportedExtPolicy))
		}
	} else if s.ExternalTrafficPolicy != "" {
		errs = append(errs, field.Invalid(xp, s.ExternalTrafficPolicy, "may only be set for externally-accessible services"))
	}
	if !external {
		ip := specPath.Child("internalTrafficPolicy")
		if s.InternalTrafficPolicy == nil {
			errs = append(errs, field.Required(ip, ""))
		} else if !oneOf(*s.InternalTrafficPolicy, supportedIntPolicy...) {
			errs = append(errs, field.NotSupported(ip, *s.InternalTrafficPolicy, supportedIntPolicy))
		}
	}
	if s.HealthCheckNodePort != 0 {
		hp := specPath.Child("healthCheckNodePort")
		if s.Type != corev1.ServiceTypeLoadBalancer || s.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
			errs = append(errs, field.Invalid(hp, s.HealthCheckNodePort, "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"))
		} else {
			errs = append(errs, validateNodePortRange(s.HealthCheckNodePort, hp, opts)...)
		}
	}
	return errs
}

func trimDot(s string) string {
	if len(s) > 0 && s[len(s)-1] == '.' {
		return s[:len(s)-1]
	}
	return s
}

// validateClusterIPs: clusterIP is "None" (headless), empty (the hub
// allocates one) or an address from the service range the client picked.
func validateClusterIPs(s *corev1.ServiceSpec, opts Options) field.ErrorList {
	var errs field.ErrorList
	fp := specPath.Child("ipFamilies")
	for i, f := range s.IPFamilies {
		if !oneOf(f, supportedIPFamilies...) {
			errs = append(errs, field.NotSupported(fp.Index(i), f, supportedIPFamilies))
		}
	}
	if len(s.IPFamilies) > 2 {
		errs = append(errs, field.TooMany(fp, len(s.IPFamilies), 2))
	} else if len(s.IPFamilies) == 2 && s.IPFamilies[0] == s.IPFamilies[1] {
		errs = append(errs, field.Duplicate(fp.Index(1), s.IPFamilies[1]))
	}
	if p := s.IPFamilyPolicy; p != nil && !oneOf(*p, supportedFamilyPolicy...) {
		errs = append(errs, field.NotSupported(specPath.Child("ipFamilyPolicy"), *p, supportedFamilyPolicy))
	}
	if len(s.ClusterIPs) > 0 && s.ClusterIP != s.ClusterIPs[0] {
		errs = append(errs, field.Invalid(specPath.Child("clusterIPs").Index(0), s.ClusterIPs[0], "must match `clusterIP`"))
	}
	if len(s.ClusterIPs) > 2 {
		errs = append(errs, field.TooMany(specPath.Child("clusterIPs"), len(s.ClusterIPs), 2))
	}
	cidr := opts.serviceCIDR()
	ips := s.ClusterIPs
	if len(ips) == 0 && s.ClusterIP != "" {
		ips = []string{s.ClusterIP}
	}
	for i, ip := range ips {
		ipp := specPath.Child("clusterIPs").Index(i)
		if i == 0 {
			ipp = specPath.Child("clusterIP")
		}
		if ip == corev1.ClusterIPNone {
			if len(ips) > 1 {
				errs = append(errs, field.Invalid(ipp, ip, "'None' must be the only value"))
			}
			if s.Type == corev1.ServiceTypeNodePort || s.Type == corev1.ServiceTypeLoadBalancer {
				errs = append(errs, field.Invalid(ipp, ip, fmt.Sprintf("may not be set to 'None' for %s services", s.Type)))
			}
			continue
		}
		a, err := netip.ParseAddr(ip)
		if err != nil {
			errs = append(errs, field.Invalid(ipp, ip, "must be empty, 'None', or a valid IP address"))
			continue
		}
		if a.Is4() == cidr.Addr().Is4() && !cidr.Contains(a) {
			errs = append(errs, field.Invalid(ipp, ip, fmt.Sprintf("provided IP is not in the valid range. The range of valid IPs is %s", cidr)))
		}
		if i < len(s.IPFamilies) && (s.IPFamilies[i] == corev1.IPv4Protocol) != a.Is4() {
			errs = append(errs, field.Invalid(ipp, ip, fmt.Sprintf("expected an %s value as indicated by `ipFamilies[%d]`", s.IPFamilies[i], i)))
		}
	}
	return errs
}

func validateServicePorts(svc *corev1.Service, opts Options) field.ErrorList {
	var errs field.ErrorList
	s := &svc.Spec
	names := map[string]bool{}
	ports := map[string]bool{}
	nodePorts := map[string]bool{}
	for i, p := range s.Ports {
		pp := specPath.Child("ports").Index(i)
		np := pp.Child("name")
		if len(s.Ports) > 1 && p.Name == "" {
			errs = append(errs, field.Required(np, ""))
		} else if p.Name != "" {
			errs = dnsLabel(errs, np, p.Name)
			if names[p.Name] {
				errs = append(errs, field.Duplicate(np, p.Name))
			}
			names[p.Name] = true
		}
		errs = appendMsgs(errs, pp.Child("port"), p.Port, utilvalidation.IsValidPortNum(int(p.Port)))
		errs = append(errs, validateProtocol(p.Protocol, pp.Child("protocol"))...)
		errs = append(errs, validatePortNumOrName(p.TargetPort, pp.Child("targetPort"))...)
		if p.AppProtocol != nil {
			errs = qualifiedName(errs, pp.Child("appProtocol"), *p.AppProtocol)
		}
		key := fmt.Sprintf("%d/%s", p.Port, p.Protocol)
		if ports[key] {
			errs = append(errs, field.Duplicate(pp, key))
		}
		ports[key] = true
		if p.NodePort == 0 {
			continue
		}
		npp := pp.Child("nodePort")
		if s.Type != corev1.ServiceTypeNodePort && s.Type != corev1.ServiceTypeLoadBalancer {
			errs = append(errs, field.Forbidden(npp, fmt.Sprintf("may not be used when `type` is '%s'", s.Type)))
			continue
		}
		errs = append(errs, validateNodePortRange(p.NodePort, npp, opts)...)
		nkey := fmt.Sprintf("%d/%s", p.NodePort, p.Protocol)
		if nodePorts[nkey] {
			errs = append(errs, field.Duplicate(npp, p.NodePort))
		}
		nodePorts[nkey] = true
	}
	return errs
}

func validateNodePortRange(port int32, path *field.Path, opts Options) field.ErrorList {
	lo, hi := opts.nodePortRange()
	if port < lo || port > hi {
		return field.ErrorList{field.Invalid(path, port, fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %d-%d", lo, hi))}
	}
	return nil
}

func validateServiceUpdate(svc, old *corev1.Service, opts Options) field.ErrorList {
	errs := validateServiceSpec(svc, opts)
	// The cluster IP is the Service's identity for every proxy: it is set
	// once (by the client or the hub's allocator) and never changed, except
	// by switching to or from ExternalName, which has none.
	if old.Spec.ClusterIP != "" && old.Spec.Type != corev1.ServiceTypeExternalName && svc.Spec.Type != corev1.ServiceTypeExternalName {
		errs = immutable(errs, specPath.Child("clusterIP"), svc.Spec.ClusterIP, old.Spec.ClusterIP)
		if len(old.Spec.ClusterIPs) > 0 && len(svc.Spec.ClusterIPs) > 0 && svc.Spec.ClusterIPs[0] != old.Spec.ClusterIPs[0] {
			errs = immutable(errs, specPath.Child("clusterIPs").Index(0), svc.Spec.ClusterIPs[0], old.Spec.ClusterIPs[0])
		}
	}
	return errs
}

func validateServiceStatus(svc *corev1.Service) field.ErrorList {
	var errs field.ErrorList
	ip := field.NewPath("status", "loadBalancer", "ingress")
	for i, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			if _, err := netip.ParseAddr(in.IP); err != nil {
				errs = append(errs, field.Invalid(ip.Index(i).Child("ip"), in.IP, "must be a valid IP address"))
			}
		}
		if in.Hostname != "" {
			errs = dnsSubdomain(errs, ip.Index(i).Child("hostname"), in.Hostname)
		}
	}
	return errs
}
