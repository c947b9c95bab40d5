package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/test/testimage"
)

// TestSites is issue 14's site test on three devices: the demo puts them
// on one site; dev2 is then moved to a site of its own by an admin (its
// agent starts over on the new site). Pod routes, proxy rules and DNS
// answers stay within each site, and a fleet-topology Service is served
// everywhere.
func TestSites(t *testing.T) {
	f := startFleet(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	cidr := map[string]string{}
	for i := 1; i <= 3; i++ {
		n, err := f.cs.CoreV1().Nodes().Get(ctx, fmt.Sprintf("dev%d", i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cidr[n.Name] = n.Spec.PodCIDR
	}
	routes := func(dev int) string {
		out, err := f.inDevice(dev, "ip", "route", "show", "proto", "241")
		if err != nil {
			t.Fatalf("routes of dev%d: %v %s", dev, err, out)
		}
		return out
	}
	if r := routes(1); !strings.Contains(r, cidr["dev2"]) || !strings.Contains(r, cidr["dev3"]) {
		t.Fatalf("on one site, dev1 routes %q, want routes to dev2's %s and dev3's %s", r, cidr["dev2"], cidr["dev3"])
	}

	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"back-office"}}}`, api.LabelZone)
	if _, err := f.cs.CoreV1().Nodes().Patch(ctx, "dev2", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "routes within each site", 2*time.Minute, func() (bool, error) {
		r1, r2, r3 := routes(1), routes(2), routes(3)
		ok := strings.Contains(r1, cidr["dev3"]) && !strings.Contains(r1, cidr["dev2"]) &&
			strings.Contains(r3, cidr["dev1"]) && !strings.Contains(r3, cidr["dev2"]) &&
			strings.TrimSpace(r2) == ""
		return ok, fmt.Errorf("dev1: %q dev2: %q dev3: %q", r1, r2, r3)
	})

	// One backend per device, behind a Service of each topology and a
	// headless one for DNS.
	image := f.image("testapp", testimage.AppPackage)
	labels := map[string]string{"app": "echo"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "echo", Image: image,
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}},
						PeriodSeconds: 1},
				}}},
			},
		},
	}
	if _, err := f.cs.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	services := map[string]*corev1.Service{}
	for _, s := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "echo"},
			Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "echo-fleet", Annotations: map[string]string{api.AnnotationServiceTopology: api.ServiceTopologyFleet}},
			Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "echo-pods"},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}}},
	} {
		created, err := f.cs.CoreV1().Services("default").Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		services[s.Name] = created
	}
	podOn := map[string]corev1.Pod{}
	waitFor(t, "a ready echo pod on each device", 3*time.Minute, func() (bool, error) {
		for _, p := range f.podsOf(ctx, "default", "app=echo") {
			if ready(&p) {
				podOn[p.Spec.NodeName] = p
			}
		}
		return len(podOn) == 3, fmt.Errorf("ready on %d devices", len(podOn))
	})

	// The slices, cut by site.
	waitFor(t, "the echo Service's slices per site", time.Minute, func() (bool, error) {
		l, err := f.cs.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: api.LabelServiceName + "=echo"})
		if err != nil {
			return false, err
		}
		got := slicesBySite(l.Items)
		want := fmt.Sprintf("back-office=%s demo-shop=%s", podOn["dev2"].Status.PodIP, sortedJoin(podOn["dev1"].Status.PodIP, podOn["dev3"].Status.PodIP))
		return got == want, fmt.Errorf("slices %s, want %s", got, want)
	})

	// Proxy rules: each device DNATs to its site's endpoints only, but to
	// every endpoint of the fleet-wide Service.
	nat := func(dev int) string {
		out, err := f.inDevice(dev, "iptables-save", "-t", "nat")
		if err != nil {
			t.Fatalf("iptables-save on dev%d: %v", dev, err)
		}
		return out
	}
	dnatTo := func(rules, svc string) []string {
		var out []string
		for _, line := range strings.Split(rules, "\n") {
			if !strings.Contains(line, "default/"+svc+":http") || !strings.Contains(line, "--to-destination ") {
				continue
			}
			ip := strings.SplitN(strings.SplitN(line, "--to-destination ", 2)[1], ":", 2)[0]
			out = append(out, ip)
		}
		sort.Strings(out)
		return out
	}
	for dev, want := range map[int][]string{
		1: {podOn["dev1"].Status.PodIP, podOn["dev3"].Status.PodIP},
		2: {podOn["dev2"].Status.PodIP},
		3: {podOn["dev1"].Status.PodIP, podOn["dev3"].Status.PodIP},
	} {
		all := []string{podOn["dev1"].Status.PodIP, podOn["dev2"].Status.PodIP, podOn["dev3"].Status.PodIP}
		waitFor(t, fmt.Sprintf("dev%d's rules", dev), time.Minute, func() (bool, error) {
			rules := nat(dev)
			site, fleet := dnatTo(rules, "echo"), dnatTo(rules, "echo-fleet")
			ok := sortedJoin(site...) == sortedJoin(want...) && sortedJoin(fleet...) == sortedJoin(all...)
			return ok, fmt.Errorf("echo to %v (want %v), echo-fleet to %v (want %v)", site, want, fleet, all)
		})
	}

	// Through the Service and through DNS, from a pod on dev3: the
	// ClusterIP spreads over both backends of its site and never leaves
	// it; the headless name answers with the site's pods only (a client
	// takes the first address, so which one is not asserted).
	ownSite := []string{podOn["dev1"].Name, podOn["dev3"].Name}
	urlIP, urlDNS := "http://"+services["echo"].Spec.ClusterIP+"/", "http://echo-pods.default.svc.cluster.local:8080/"
	s := f.runClient(ctx, "client-dev3", "dev3", "-urls", urlIP+","+urlDNS, "-n", "30", "-interval", "10ms")
	if s.Failed > 0 {
		t.Errorf("%d requests failed from dev3: %v", s.Failed, s.Errors)
	}
	if got := keys(s.Backends[urlIP]); sortedJoin(got...) != sortedJoin(ownSite...) {
		t.Errorf("from dev3, %s reached %v, want %v", urlIP, got, ownSite)
	}
	got := keys(s.Backends[urlDNS])
	if len(got) == 0 {
		t.Errorf("from dev3, %s reached nothing", urlDNS)
	}
	for _, b := range got {
		if b != ownSite[0] && b != ownSite[1] {
			t.Errorf("from dev3, %s reached %s, outside its site %v", urlDNS, b, ownSite)
		}
	}
	if t.Failed() {
		for _, dev := range []string{"dev1", "dev2", "dev3"} {
			if b, err := os.ReadFile(filepath.Join(f.dir, dev+".log")); err == nil {
				t.Logf("--- %s.log (last 4 KiB)\n%s", dev, tail(b, 4096))
			}
		}
	}
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// slicesBySite is "site=ip,ip site=ip" over slices, sites sorted.
func slicesBySite(slices []discoveryv1.EndpointSlice) string {
	ips := map[string][]string{}
	for _, s := range slices {
		site := s.Labels[api.LabelSite]
		for _, ep := range s.Endpoints {
			ips[site] = append(ips[site], ep.Addresses...)
		}
	}
	var parts []string
	for site, l := range ips {
		parts = append(parts, site+"="+sortedJoin(l...))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func sortedJoin(s ...string) string {
	c := append([]string(nil), s...)
	sort.Strings(c)
	return strings.Join(c, ",")
}
