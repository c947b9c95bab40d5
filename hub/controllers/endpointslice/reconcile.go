package endpointslice

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/podutil"
)

// ManagedBy is the value of the managed-by label on the slices this loop
// owns; slices with another value are someone else's and never touched.
const ManagedBy = "endpointslice-controller.flotilla.dev"

// MaxEndpointsPerSlice is Kubernetes' default.
const MaxEndpointsPerSlice = 100

// group is what the slices of one group share: a site and a port set.
type group struct {
	site  string
	ports []discoveryv1.EndpointPort
}

// desired is the endpoints one Service should have, grouped by the site
// they are in and the port set they serve: one slice never mixes sites, so
// that each device can watch its own site's slices only.
type desired struct {
	groups    map[string]group
	endpoints map[string]map[string]discoveryv1.Endpoint // group key -> endpoint key -> endpoint
}

func groupKey(site string, ports []discoveryv1.EndpointPort) string {
	return site + "\x00" + portKey(ports)
}

// Desired computes the endpoints of svc from the pods its selector matches.
// nodeZone gives a node's zone label ("" when unknown), which is also the
// site of its endpoints unless svc is served fleet-wide.
func Desired(svc *corev1.Service, pods []*corev1.Pod, nodeZone func(node string) string) desired {
	d := desired{groups: map[string]group{}, endpoints: map[string]map[string]discoveryv1.Endpoint{}}
	topology, _ := api.ServiceTopology(svc)
	for _, pod := range pods {
		if !includePod(pod) || !mirrorMayServe(svc, pod) {
			continue
		}
		ip := podIPv4(pod)
		if ip == "" {
			continue
		}
		ports := endpointPorts(svc, pod)
		ep := podEndpoint(svc, pod, ip, nodeZone)
		site := api.SiteFleet
		if topology == api.ServiceTopologySite {
			site = ptr.Deref(ep.Zone, "")
		}
		gk := groupKey(site, ports)
		if _, ok := d.groups[gk]; !ok {
			d.groups[gk] = group{site: site, ports: ports}
			d.endpoints[gk] = map[string]discoveryv1.Endpoint{}
		}
		d.endpoints[gk][endpointKey(&ep)] = ep
	}
	return d
}

// includePod: a pod that will not run again has no place in endpoints.
func includePod(pod *corev1.Pod) bool {
	switch pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodSucceeded
	case corev1.RestartPolicyOnFailure:
		return pod.Status.Phase != corev1.PodSucceeded
	}
	return true
}

// mirrorMayServe: a mirror pod (a device's static pod) is an endpoint only
// when both sides ask: the static manifest (AnnotationServiceEndpoint)
// and the Service (AnnotationMirrorEndpoints), which devices cannot write.
// A device's word alone must not draw a Service's traffic to it.
func mirrorMayServe(svc *corev1.Service, pod *corev1.Pod) bool {
	if !podutil.IsMirror(pod) {
		return true
	}
	return pod.Annotations[api.AnnotationServiceEndpoint] == "true" && svc.Annotations[api.AnnotationMirrorEndpoints] == "true"
}

func podIPv4(pod *corev1.Pod) string {
	cands := []string{pod.Status.PodIP}
	for _, ip := range pod.Status.PodIPs {
		cands = append(cands, ip.IP)
	}
	for _, c := range cands {
		if a, err := netip.ParseAddr(c); err == nil && a.Is4() {
			return a.String()
		}
	}
	return ""
}

func podEndpoint(svc *corev1.Service, pod *corev1.Pod, ip string, nodeZone func(string) string) discoveryv1.Endpoint {
	serving := svc.Spec.PublishNotReadyAddresses || podutil.IsReady(pod)
	terminating := pod.DeletionTimestamp != nil
	// Never ready while terminating, unless the Service asked for every
	// address regardless of state.
	ready := svc.Spec.PublishNotReadyAddresses || (serving && !terminating)
	ep := discoveryv1.Endpoint{
		Addresses: []string{ip},
		Conditions: discoveryv1.EndpointConditions{
			Ready: ptr.To(ready), Serving: ptr.To(serving), Terminating: ptr.To(terminating),
		},
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
	}
	if pod.Spec.NodeName != "" {
		ep.NodeName = ptr.To(pod.Spec.NodeName)
		if nodeZone != nil {
			if z := nodeZone(pod.Spec.NodeName); z != "" {
				ep.Zone = ptr.To(z)
			}
		}
	}
	if pod.Spec.Hostname != "" && pod.Spec.Subdomain == svc.Name && pod.Namespace == svc.Namespace {
		ep.Hostname = ptr.To(pod.Spec.Hostname)
	}
	return ep
}

func endpointKey(ep *discoveryv1.Endpoint) string {
	if ep.TargetRef != nil && ep.TargetRef.UID != "" {
		return string(ep.TargetRef.UID)
	}
	return strings.Join(ep.Addresses, ",")
}

// endpointPorts resolves svc's ports for pod; a named targetPort the pod
// does not declare leaves that port out for this pod.
func endpointPorts(svc *corev1.Service, pod *corev1.Pod) []discoveryv1.EndpointPort {
	var out []discoveryv1.EndpointPort
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		n, ok := FindPort(pod, sp)
		if !ok {
			continue
		}
		proto := sp.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		out = append(out, discoveryv1.EndpointPort{
			Name: ptr.To(sp.Name), Port: ptr.To(n), Protocol: ptr.To(proto), AppProtocol: sp.AppProtocol,
		})
	}
	return out
}

// FindPort resolves a Service port's targetPort on pod: a number is taken
// as is (unset means the Service port), a name is looked up among the
// pod's container ports with the same protocol.
func FindPort(pod *corev1.Pod, sp *corev1.ServicePort) (int32, bool) {
	proto := sp.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	switch sp.TargetPort.Type {
	case intstr.String:
		if sp.TargetPort.StrVal == "" {
			return sp.Port, true
		}
		containers := append(append([]corev1.Container(nil), pod.Spec.Containers...), pod.Spec.InitContainers...)
		for _, c := range containers {
			for _, p := range c.Ports {
				pp := p.Protocol
				if pp == "" {
					pp = corev1.ProtocolTCP
				}
				if p.Name == sp.TargetPort.StrVal && pp == proto {
					return p.ContainerPort, true
				}
			}
		}
		return 0, false
	default:
		if sp.TargetPort.IntVal == 0 {
			return sp.Port, true
		}
		return sp.TargetPort.IntVal, true
	}
}

func portKey(ports []discoveryv1.EndpointPort) string {
	parts := make([]string, len(ports))
	for i, p := range ports {
		parts[i] = fmt.Sprintf("%s/%s/%d/%s", ptr.Deref(p.Name, ""), ptr.Deref(p.Protocol, ""), ptr.Deref(p.Port, 0), ptr.Deref(p.AppProtocol, ""))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// Plan is what a sync writes.
type Plan struct {
	Create []*discoveryv1.EndpointSlice
	Update []*discoveryv1.EndpointSlice
	Delete []*discoveryv1.EndpointSlice
}

// Reconcile plans the writes that turn existing (this loop's slices of svc)
// into want, touching as few slices as it can.
func Reconcile(svc *corev1.Service, want desired, existing []*discoveryv1.EndpointSlice, maxPerSlice int) Plan {
	var plan Plan
	byGroup := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		// A slice from before sites has no site label: it is taken as
		// the devices without a site's, and relabelled or emptied.
		gk := groupKey(s.Labels[api.LabelSite], s.Ports)
		byGroup[gk] = append(byGroup[gk], s)
	}
	// Deterministic order, so that two syncs of the same state agree.
	pks := make([]string, 0, len(want.endpoints))
	for pk := range want.endpoints {
		pks = append(pks, pk)
	}
	sort.Strings(pks)

	for _, pk := range pks {
		g := want.groups[pk]
		remaining := want.endpoints[pk]
		var keep []*discoveryv1.EndpointSlice // slices staying, possibly updated
		changed := map[*discoveryv1.EndpointSlice]bool{}
		var emptied []*discoveryv1.EndpointSlice
		for _, s := range sortedSlices(byGroup[pk]) {
			cp := s.DeepCopy()
			cp.Endpoints = cp.Endpoints[:0]
			for _, ep := range s.Endpoints {
				k := endpointKey(&ep)
				w, ok := remaining[k]
				if !ok {
					continue // gone
				}
				delete(remaining, k)
				cp.Endpoints = append(cp.Endpoints, w)
			}
			setMeta(cp, svc, g.site)
			if !apiequality.Semantic.DeepEqual(cp.Endpoints, s.Endpoints) || !apiequality.Semantic.DeepEqual(cp.ObjectMeta, s.ObjectMeta) {
				changed[cp] = true
			}
			if len(cp.Endpoints) == 0 {
				emptied = append(emptied, cp)
				continue
			}
			keep = append(keep, cp)
		}
		delete(byGroup, pk)

		news := sortedEndpoints(remaining)
		// Room in slices already being written costs nothing extra; then
		// the fullest slices, to keep the count of slices down.
		sort.SliceStable(keep, func(i, j int) bool {
			if changed[keep[i]] != changed[keep[j]] {
				return changed[keep[i]]
			}
			return len(keep[i].Endpoints) > len(keep[j].Endpoints)
		})
		for _, s := range keep {
			if len(news) == 0 {
				break
			}
			room := maxPerSlice - len(s.Endpoints)
			if room <= 0 {
				continue
			}
			n := min(room, len(news))
			s.Endpoints = append(s.Endpoints, news[:n]...)
			news = news[n:]
			changed[s] = true
		}
		// Emptied slices are reused before new ones are made.
		for len(news) > 0 && len(emptied) > 0 {
			s := emptied[0]
			emptied = emptied[1:]
			n := min(maxPerSlice, len(news))
			s.Endpoints = append(s.Endpoints, news[:n]...)
			news = news[n:]
			keep = append(keep, s)
			changed[s] = true
		}
		for len(news) > 0 {
			n := min(maxPerSlice, len(news))
			s := newSlice(svc, g.site, g.ports)
			s.Endpoints = append(s.Endpoints, news[:n]...)
			news = news[n:]
			plan.Create = append(plan.Create, s)
		}
		for _, s := range keep {
			if changed[s] {
				plan.Update = append(plan.Update, s)
			}
		}
		plan.Delete = append(plan.Delete, emptied...)
	}
	// Slices for sites and port sets nobody serves any more.
	for _, ss := range byGroup {
		plan.Delete = append(plan.Delete, ss...)
	}
	sort.SliceStable(plan.Delete, func(i, j int) bool { return plan.Delete[i].Name < plan.Delete[j].Name })

	// A Service without endpoints keeps one empty slice, so watchers can
	// tell "no endpoints" from "not synced yet"; every device takes it.
	if len(plan.Create) == 0 && len(plan.Update) == 0 && len(plan.Delete) == len(existing) {
		placeholder := newSlice(svc, api.SiteFleet, nil)
		for i, s := range plan.Delete {
			if len(s.Ports) == 0 && len(s.Endpoints) == 0 && !needsLabels(s, svc, api.SiteFleet) {
				// Already there: keep it.
				plan.Delete = append(plan.Delete[:i:i], plan.Delete[i+1:]...)
				return plan
			}
		}
		if len(plan.Delete) > 0 {
			// Reuse a slice being deleted as the placeholder.
			s := plan.Delete[0].DeepCopy()
			s.Ports, s.Endpoints = nil, nil
			setMeta(s, svc, api.SiteFleet)
			plan.Delete = plan.Delete[1:]
			plan.Update = append(plan.Update, s)
			return plan
		}
		plan.Create = append(plan.Create, placeholder)
	}
	return plan
}

func sortedSlices(ss []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	out := append([]*discoveryv1.EndpointSlice(nil), ss...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func sortedEndpoints(m map[string]discoveryv1.Endpoint) []discoveryv1.Endpoint {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]discoveryv1.Endpoint, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}

var serviceGVK = corev1.SchemeGroupVersion.WithKind("Service")

func newSlice(svc *corev1.Service, site string, ports []discoveryv1.EndpointPort) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    generateName(svc.Name),
			Namespace:       svc.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(svc, serviceGVK)},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       ports,
		Endpoints:   []discoveryv1.Endpoint{},
	}
	setMeta(s, svc, site)
	return s
}

// generateName keeps room for the 5 random characters within 63.
func generateName(svc string) string {
	if len(svc) > 57 {
		svc = svc[:57]
	}
	return svc + "-"
}

// setMeta gives s the Service's labels plus the two the proxy selects on
// and the site devices watch by.
func setMeta(s *discoveryv1.EndpointSlice, svc *corev1.Service, site string) {
	labels := map[string]string{}
	for k, v := range svc.Labels {
		if k == api.LabelServiceName || k == api.LabelManagedBy || k == corev1.IsHeadlessService || k == api.LabelSite {
			continue
		}
		labels[k] = v
	}
	labels[api.LabelServiceName] = svc.Name
	labels[api.LabelManagedBy] = ManagedBy
	labels[api.LabelSite] = site
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		labels[corev1.IsHeadlessService] = ""
	}
	s.Labels = labels
}

// needsLabels reports whether s's labels differ from what setMeta writes.
func needsLabels(s *discoveryv1.EndpointSlice, svc *corev1.Service, site string) bool {
	cp := s.DeepCopy()
	setMeta(cp, svc, site)
	return !apiequality.Semantic.DeepEqual(cp.Labels, s.Labels)
}
