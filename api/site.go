package api

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Sites. A device's site is its LabelZone; devices on one site share an
// L2 segment (or a routed network of their own) and reach each other's
// pods, devices of different sites need not. So pod routes go only to
// devices of the same site, and a device's proxy and DNS serve only its
// own site's endpoints unless the Service opts out
// (AnnotationServiceTopology: fleet). Devices without a zone form one site
// together: a fleet where nobody sets a zone behaves as one network.
const (
	// LabelSite on an EndpointSlice names the site its endpoints are in
	// ("" for the devices without a site), or SiteFleet for the slices
	// every device takes. Each device watches only the slices of its own
	// site and SiteFleet (SiteSelector).
	LabelSite = "flotilla.dev/site"
	// SiteFleet is LabelSite's value on slices served fleet-wide: those
	// of fleet-topology Services, the empty slice of a Service with no
	// endpoints, and slices written by anyone but the hub. It is reserved:
	// no Node may have it as its zone.
	SiteFleet = "fleet.flotilla.dev"
	// AnnotationServiceTopology on a Service is ServiceTopologySite (the
	// default) or ServiceTopologyFleet.
	AnnotationServiceTopology = "service.flotilla.dev/topology"
	// ServiceTopologySite serves each device the endpoints of its site.
	ServiceTopologySite = "site"
	// ServiceTopologyFleet serves every endpoint to every device, for
	// fleets whose sites are one routed network.
	ServiceTopologyFleet = "fleet"
)

// SiteOf is a Node's site: its zone label, "" when it has none.
func SiteOf(node *corev1.Node) string {
	if node == nil {
		return ""
	}
	return node.Labels[LabelZone]
}

// SameSite says whether two Nodes are on one site (both without a zone
// included).
func SameSite(a, b *corev1.Node) bool { return SiteOf(a) == SiteOf(b) }

// ServiceTopology is svc's topology: ServiceTopologySite unless the
// annotation says ServiceTopologyFleet. A value that is neither is an
// error (validation refuses it; readers fall back to site, the safe
// choice on networks split by site).
func ServiceTopology(svc *corev1.Service) (string, error) {
	v, ok := svc.Annotations[AnnotationServiceTopology]
	switch {
	case !ok || v == ServiceTopologySite:
		return ServiceTopologySite, nil
	case v == ServiceTopologyFleet:
		return ServiceTopologyFleet, nil
	}
	return ServiceTopologySite, fmt.Errorf("annotation %s: %q is not %q or %q", AnnotationServiceTopology, v, ServiceTopologySite, ServiceTopologyFleet)
}

// SiteSelector selects the EndpointSlices a device of site serves: its
// site's and the fleet-wide ones.
func SiteSelector(site string) (labels.Selector, error) {
	r, err := labels.NewRequirement(LabelSite, selection.In, []string{site, SiteFleet})
	if err != nil {
		return nil, fmt.Errorf("site %q is not a label value: %w", site, err)
	}
	return labels.NewSelector().Add(*r), nil
}
