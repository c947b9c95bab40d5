package validation

import (
	"fmt"
	"net/netip"
	"reflect"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"flotilla.dev/flotilla/api"
)

func validateNamespace(ns *corev1.Namespace) field.ErrorList {
	errs := objectMeta(&ns.ObjectMeta, false, nameIsDNSLabel)
	errs = append(errs, validateNamespacePodSecurity(ns, nil)...)
	return append(errs, validateNamespaceSpec(ns)...)
}

func validateNamespaceSpec(ns *corev1.Namespace) field.ErrorList {
	var errs field.ErrorList
	for i, f := range ns.Spec.Finalizers {
		errs = qualifiedName(errs, specPath.Child("finalizers").Index(i), string(f))
	}
	return errs
}

func validateNamespaceStatus(ns *corev1.Namespace) field.ErrorList {
	phases := []corev1.NamespacePhase{corev1.NamespaceActive, corev1.NamespaceTerminating}
	if p := ns.Status.Phase; p != "" && !oneOf(p, phases...) {
		return field.ErrorList{field.NotSupported(field.NewPath("status", "phase"), p, phases)}
	}
	return nil
}

func validateNode(n *corev1.Node) field.ErrorList {
	errs := objectMeta(&n.ObjectMeta, false, nameIsDNSSubdomain)
	errs = append(errs, validateNodeSpec(n)...)
	return append(errs, validateNodeStatus(n)...)
}

func validateNodeSpec(n *corev1.Node) field.ErrorList {
	var errs field.ErrorList
	if api.SiteOf(n) == api.SiteFleet {
		errs = append(errs, field.Invalid(metaPath.Child("labels").Key(api.LabelZone), api.SiteFleet,
			"is reserved for the EndpointSlices every device serves; give the site another name"))
	}
	s := &n.Spec
	cp := specPath.Child("podCIDRs")
	families := map[bool]bool{}
	for i, c := range s.PodCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil || p.Masked() != p {
			errs = append(errs, field.Invalid(cp.Index(i), c, "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"))
			continue
		}
		if families[p.Addr().Is4()] {
			errs = append(errs, field.Invalid(cp, s.PodCIDRs, "may specify no more than one CIDR for each IP family"))
		}
		families[p.Addr().Is4()] = true
	}
	if len(s.PodCIDRs) > 2 {
		errs = append(errs, field.TooMany(cp, len(s.PodCIDRs), 2))
	}
	if s.PodCIDR != "" && len(s.PodCIDRs) > 0 && s.PodCIDR != s.PodCIDRs[0] {
		errs = append(errs, field.Invalid(cp.Index(0), s.PodCIDRs[0], "must match `podCIDR`"))
	}
	errs = append(errs, validateTaints(s.Taints, specPath.Child("taints"))...)
	return errs
}

func validateTaints(taints []corev1.Taint, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, t := range taints {
		tp := path.Index(i)
		errs = requireString(errs, tp.Child("key"), t.Key, qualifiedName)
		errs = labelValue(errs, tp.Child("value"), t.Value)
		ep := tp.Child("effect")
		switch {
		case t.Effect == "":
			errs = append(errs, field.Required(ep, ""))
		case !oneOf(t.Effect, supportedTaintEffects...):
			errs = append(errs, field.NotSupported(ep, t.Effect, supportedTaintEffects))
		}
		key := t.Key + "\x00" + string(t.Effect)
		if seen[key] {
			errs = append(errs, field.Duplicate(ep, t.Effect))
		}
		seen[key] = true
	}
	return errs
}

func validateNodeUpdate(n, old *corev1.Node) field.ErrorList {
	errs := validateNodeSpec(n)
	errs = append(errs, validateNodeStatus(n)...)
	// A node's pod range is where its running pods have their addresses.
	if len(old.Spec.PodCIDRs) > 0 && !reflect.DeepEqual(n.Spec.PodCIDRs, old.Spec.PodCIDRs) {
		errs = append(errs, field.Forbidden(specPath.Child("podCIDRs"), `node updates may not change podCIDR except from "" to valid`))
	}
	if old.Spec.ProviderID != "" && n.Spec.ProviderID != old.Spec.ProviderID {
		errs = append(errs, field.Forbidden(specPath.Child("providerID"), `node updates may not change providerID except from "" to valid`))
	}
	return errs
}

func validateNodeStatus(n *corev1.Node) field.ErrorList {
	var errs field.ErrorList
	sp := field.NewPath("status")
	for _, list := range []struct {
		name string
		rl   corev1.ResourceList
	}{{"capacity", n.Status.Capacity}, {"allocatable", n.Status.Allocatable}} {
		for _, k := range sortedKeys(list.rl) {
			kp := sp.Child(list.name).Key(k)
			errs = qualifiedName(errs, kp, k)
			if q := list.rl[corev1.ResourceName(k)]; q.Sign() < 0 {
				errs = append(errs, field.Invalid(kp, q.String(), "must be greater than or equal to 0"))
			}
		}
	}
	for i, a := range n.Status.Addresses {
		ap := sp.Child("addresses").Index(i)
		if a.Type == "" {
			errs = append(errs, field.Required(ap.Child("type"), ""))
		}
		if a.Address == "" {
			errs = append(errs, field.Required(ap.Child("address"), ""))
		} else if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
			if _, err := netip.ParseAddr(a.Address); err != nil {
				errs = append(errs, field.Invalid(ap.Child("address"), a.Address, "must be a valid IP address"))
			}
		}
	}
	if port := n.Status.DaemonEndpoints.KubeletEndpoint.Port; port != 0 {
		errs = appendMsgs(errs, sp.Child("daemonEndpoints", "kubeletEndpoint", "Port"), port, utilvalidation.IsValidPortNum(int(port)))
	}
	return errs
}

// Limits of an Event, as in Kubernetes.
const (
	eventFieldLimit   = 128
	eventMessageLimit = 4096
)

func validateEvent(e *corev1.Event) field.ErrorList {
	errs := objectMeta(&e.ObjectMeta, true, nameIsDNSSubdomain)
	return append(errs, validateEventBody(e)...)
}

// validateEventBody follows Kubernetes' rules for core/v1 Events: the
// event lives in its object's namespace, or, for cluster-scoped objects
// such as Nodes, in "default" (or the system namespace for events that
// carry an eventTime, as the events recorder writes them).
func validateEventBody(e *corev1.Event) field.ErrorList {
	var errs field.ErrorList
	io := field.NewPath("involvedObject")
	errs = requireString(errs, io.Child("kind"), e.InvolvedObject.Kind, nil)
	errs = requireString(errs, io.Child("name"), e.InvolvedObject.Name, nil)
	nsp := io.Child("namespace")
	mismatch := field.Invalid(nsp, e.InvolvedObject.Namespace, "does not match event.namespace")
	if e.EventTime.IsZero() {
		switch {
		case e.InvolvedObject.Namespace == "" && e.Namespace != "" && e.Namespace != metav1.NamespaceDefault:
			errs = append(errs, mismatch)
		case e.InvolvedObject.Namespace != "" && e.Namespace != e.InvolvedObject.Namespace:
			errs = append(errs, mismatch)
		}
		return errs
	}
	if e.InvolvedObject.Namespace == "" && e.Namespace != metav1.NamespaceDefault && e.Namespace != api.NamespaceSystem {
		errs = append(errs, mismatch)
	}
	errs = requireString(errs, field.NewPath("reportingComponent"), e.ReportingController, qualifiedName)
	for _, f := range []struct {
		name, value string
	}{{"reportingInstance", e.ReportingInstance}, {"action", e.Action}, {"reason", e.Reason}} {
		p := field.NewPath(f.name)
		if f.value == "" {
			errs = append(errs, field.Required(p, ""))
		} else if len(f.value) > eventFieldLimit {
			errs = append(errs, field.Invalid(p, "", fmt.Sprintf("can have at most %d characters", eventFieldLimit)))
		}
	}
	if len(e.Message) > eventMessageLimit {
		errs = append(errs, field.Invalid(field.NewPath("message"), "", fmt.Sprintf("can have at most %d characters", eventMessageLimit)))
	}
	if e.Type != corev1.EventTypeNormal && e.Type != corev1.EventTypeWarning {
		errs = append(errs, field.NotSupported(field.NewPath("type"), e.Type, []string{corev1.EventTypeNormal, corev1.EventTypeWarning}))
	}
	return errs
}

func validateLease(l *coordinationv1.Lease) field.ErrorList {
	errs := objectMeta(&l.ObjectMeta, true, nameIsDNSSubdomain)
	return append(errs, validateLeaseSpec(l)...)
}

func validateLeaseSpec(l *coordinationv1.Lease) field.ErrorList {
	var errs field.ErrorList
	s := &l.Spec
	if s.LeaseDurationSeconds != nil {
		errs = positive(errs, specPath.Child("leaseDurationSeconds"), int64(*s.LeaseDurationSeconds))
	}
	if s.LeaseTransitions != nil {
		errs = nonNegative(errs, specPath.Child("leaseTransitions"), int64(*s.LeaseTransitions))
	}
	strategies := []coordinationv1.CoordinatedLeaseStrategy{coordinationv1.OldestEmulationVersion}
	if s.Strategy != nil && !oneOf(*s.Strategy, strategies...) {
		errs = append(errs, field.NotSupported(specPath.Child("strategy"), *s.Strategy, strategies))
	}
	if s.PreferredHolder != nil && *s.PreferredHolder != "" && s.Strategy == nil {
		errs = append(errs, field.Forbidden(specPath.Child("preferredHolder"), "may only be specified if `strategy` is defined"))
	}
	return errs
}

// Limits of an EndpointSlice, as in Kubernetes.
const (
	maxEndpoints          = 1000
	maxAddressesPerEntry  = 100
	maxEndpointSlicePorts = 20000
)

var supportedAddressTypes = []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN}

func validateEndpointSlice(es *discoveryv1.EndpointSlice) field.ErrorList {
	errs := objectMeta(&es.ObjectMeta, true, nameIsDNSSubdomain)
	return append(errs, validateEndpointSliceBody(es)...)
}

func validateEndpointSliceBody(es *discoveryv1.EndpointSlice) field.ErrorList {
	var errs field.ErrorList
	tp := field.NewPath("addressType")
	switch {
	case es.AddressType == "":
		errs = append(errs, field.Required(tp, ""))
	case !oneOf(es.AddressType, supportedAddressTypes...):
		errs = append(errs, field.NotSupported(tp, es.AddressType, supportedAddressTypes))
	}
	ep := field.NewPath("endpoints")
	if len(es.Endpoints) > maxEndpoints {
		errs = append(errs, field.TooMany(ep, len(es.Endpoints), maxEndpoints))
	}
	for i, e := range es.Endpoints {
		ip := ep.Index(i)
		ap := ip.Child("addresses")
		switch n := len(e.Addresses); {
		case n == 0:
			errs = append(errs, field.Required(ap, "must contain at least 1 address"))
		case n > maxAddressesPerEntry:
			errs = append(errs, field.TooMany(ap, n, maxAddressesPerEntry))
		}
		for j, a := range e.Addresses {
			errs = append(errs, validateEndpointAddress(es.AddressType, a, ap.Index(j))...)
		}
		if e.Hostname != nil {
			errs = dnsLabel(errs, ip.Child("hostname"), *e.Hostname)
		}
		if e.NodeName != nil {
			errs = dnsSubdomain(errs, ip.Child("nodeName"), *e.NodeName)
		}
		if e.TargetRef != nil && e.TargetRef.Name == "" {
			errs = append(errs, field.Required(ip.Child("targetRef", "name"), ""))
		}
	}
	pp := field.NewPath("ports")
	if len(es.Ports) > maxEndpointSlicePorts {
		errs = append(errs, field.TooMany(pp, len(es.Ports), maxEndpointSlicePorts))
	}
	names := map[string]bool{}
	for i, p := range es.Ports {
		ip := pp.Index(i)
		if p.Name != nil && *p.Name != "" {
			errs = dnsLabel(errs, ip.Child("name"), *p.Name)
		}
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if names[name] {
			errs = append(errs, field.Duplicate(ip.Child("name"), name))
		}
		names[name] = true
		if p.Protocol == nil {
			errs = append(errs, field.Required(ip.Child("protocol"), ""))
		} else {
			errs = append(errs, validateProtocol(*p.Protocol, ip.Child("protocol"))...)
		}
		if p.Port != nil {
			errs = appendMsgs(errs, ip.Child("port"), *p.Port, utilvalidation.IsValidPortNum(int(*p.Port)))
		}
		if p.AppProtocol != nil {
			errs = qualifiedName(errs, ip.Child("appProtocol"), *p.AppProtocol)
		}
	}
	return errs
}

func validateEndpointAddress(t discoveryv1.AddressType, a string, path *field.Path) field.ErrorList {
	switch t {
	case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6:
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.Is4() != (t == discoveryv1.AddressTypeIPv4) || ip.Zone() != "" {
			return field.ErrorList{field.Invalid(path, a, fmt.Sprintf("must be a valid %s address", t))}
		}
	case discoveryv1.AddressTypeFQDN:
		return utilvalidation.IsFullyQualifiedDomainName(path, a)
	}
	return nil
}

func validateEndpointSliceUpdate(es, old *discoveryv1.EndpointSlice) field.ErrorList {
	errs := validateEndpointSliceBody(es)
	return immutable(errs, field.NewPath("addressType"), es.AddressType, old.AddressType)
}
