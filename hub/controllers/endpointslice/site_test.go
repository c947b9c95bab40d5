package endpointslice

import (
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"flotilla.dev/flotilla/api"
)

// zones puts node-0 in shop-a, node-1 in shop-b and leaves node-2
// without a site (pod(i) runs on node-(i%3)).
func zones(node string) string {
	return map[string]string{"node-0": "shop-a", "node-1": "shop-b"}[node]
}

// bySite is the endpoints' IPs per LabelSite value of the slices.
func bySite(t *testing.T, ss []*discoveryv1.EndpointSlice) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, s := range ss {
		site, ok := s.Labels[api.LabelSite]
		if !ok {
			t.Fatalf("slice %s has no %s label: %v", s.Name, api.LabelSite, s.Labels)
		}
		if _, seen := out[site]; !seen {
			out[site] = nil // an empty slice still counts as its site's
		}
		for _, ep := range s.Endpoints {
			if site != api.SiteFleet && ptrZone(ep) != site {
				t.Errorf("slice of site %q holds an endpoint in zone %q", site, ptrZone(ep))
			}
			out[site] = append(out[site], ep.Addresses[0])
		}
	}
	for _, ips := range out {
		sort.Strings(ips)
	}
	return out
}

func ptrZone(ep discoveryv1.Endpoint) string {
	if ep.Zone == nil {
		return ""
	}
	return *ep.Zone
}

func TestSlicesShardedBySite(t *testing.T) {
	svc := service(httpPort)
	var pods []*corev1.Pod
	for i := range 6 {
		pods = append(pods, pod(i, true, 8080))
	}
	plan := Reconcile(svc, Desired(svc, pods, zones), nil, MaxEndpointsPerSlice)
	got := bySite(t, plan.Create)
	want := map[string][]string{
		"shop-a": {"10.42.0.2", "10.42.0.5"},
		"shop-b": {"10.42.0.3", "10.42.0.6"},
		"":       {"10.42.0.4", "10.42.0.7"},
	}
	if len(got) != len(want) {
		t.Fatalf("slices by site %v, want %v", got, want)
	}
	for site, ips := range want {
		if len(got[site]) != len(ips) || got[site][0] != ips[0] || got[site][1] != ips[1] {
			t.Errorf("site %q: %v, want %v", site, got[site], ips)
		}
	}
	// Stable: a second pass over what the first made writes nothing.
	n := 0
	existing := applyPlan(nil, plan, &n)
	again := Reconcile(svc, Desired(svc, pods, zones), existing, MaxEndpointsPerSlice)
	if len(again.Create)+len(again.Update)+len(again.Delete) != 0 {
		t.Fatalf("second pass: %d creates %d updates %d deletes, want none", len(again.Create), len(again.Update), len(again.Delete))
	}

	// node-0 moves to shop-b: its endpoints follow, shop-a's slice goes.
	moved := func(node string) string {
		if node == "node-0" {
			return "shop-b"
		}
		return zones(node)
	}
	plan = Reconcile(svc, Desired(svc, pods, moved), existing, MaxEndpointsPerSlice)
	after := bySite(t, applyPlan(existing, plan, &n))
	if _, ok := after["shop-a"]; ok || len(after["shop-b"]) != 4 || len(after[""]) != 2 {
		t.Fatalf("after the move: %v, want shop-b with 4 endpoints, no shop-a", after)
	}
}

func TestFleetTopologyIsOneShard(t *testing.T) {
	svc := service(httpPort)
	svc.Annotations = map[string]string{api.AnnotationServiceTopology: api.ServiceTopologyFleet}
	var pods []*corev1.Pod
	for i := range 6 {
		pods = append(pods, pod(i, true, 8080))
	}
	plan := Reconcile(svc, Desired(svc, pods, zones), nil, MaxEndpointsPerSlice)
	got := bySite(t, plan.Create)
	if len(plan.Create) != 1 || len(got[api.SiteFleet]) != 6 {
		t.Fatalf("%d slices %v, want one fleet-wide slice with 6 endpoints", len(plan.Create), got)
	}
	// Zones still tell consumers where each endpoint is.
	if z := ptrZone(plan.Create[0].Endpoints[0]); z == "" && ptrZone(plan.Create[0].Endpoints[1]) == "" {
		t.Errorf("fleet-wide endpoints lost their zones")
	}
}

// TestSlicesFromBeforeSitesAreRelabelled: slices written before sites
// existed carry no site label, which no device selects; they are
// relabelled or emptied, and every endpoint ends in its site's slice.
func TestSlicesFromBeforeSitesAreRelabelled(t *testing.T) {
	svc := service(httpPort)
	var pods []*corev1.Pod
	for i := range 6 {
		pods = append(pods, pod(i, true, 8080))
	}
	// Before: everything in one slice, built as if no node had a zone.
	old := Reconcile(svc, Desired(svc, pods, nil), nil, MaxEndpointsPerSlice)
	n := 0
	existing := applyPlan(nil, old, &n)
	for _, s := range existing {
		delete(s.Labels, api.LabelSite)
	}
	plan := Reconcile(svc, Desired(svc, pods, zones), existing, MaxEndpointsPerSlice)
	got := bySite(t, applyPlan(existing, plan, &n))
	if len(got) != 3 || len(got["shop-a"]) != 2 || len(got["shop-b"]) != 2 || len(got[""]) != 2 {
		t.Fatalf("after the upgrade: %v, want two endpoints in each of shop-a, shop-b and no site", got)
	}
}

func TestEmptyServiceSliceIsFleetWide(t *testing.T) {
	svc := service(httpPort)
	plan := Reconcile(svc, Desired(svc, nil, zones), nil, MaxEndpointsPerSlice)
	if len(plan.Create) != 1 || plan.Create[0].Labels[api.LabelSite] != api.SiteFleet {
		t.Fatalf("plan %+v, want one empty slice every device takes", plan.Create)
	}
}
