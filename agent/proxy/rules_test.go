package proxy

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// fixture covers every kind of rule the proxy writes.
func fixture() ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	web := service("default", "web", "10.43.0.10", port{name: "http", port: 80})
	webSl := endpointSlice("default", "web", "web-1", []port{{name: "http", port: 8080}},
		ep{ip: "10.42.1.7", node: "dev-a"}, ep{ip: "10.42.2.3"}, ep{ip: "10.42.2.4", notReady: true}, ep{ip: "10.42.1.8", node: "dev-a"})

	dns := service("kube-system", "dns", "10.43.0.53", port{name: "dns", proto: corev1.ProtocolUDP, port: 53}, port{name: "dns-tcp", port: 53})
	dnsSl := endpointSlice("kube-system", "dns", "dns-1", []port{{name: "dns", proto: corev1.ProtocolUDP, port: 5353}, {name: "dns-tcp", port: 5353}},
		ep{ip: "10.42.3.9"})

	sticky := service("shop", "cart", "10.43.1.1", port{port: 443})
	sticky.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	stickySl := endpointSlice("shop", "cart", "cart-1", []port{{port: 8443}}, ep{ip: "10.42.1.20"}, ep{ip: "10.42.2.20"})

	empty := service("shop", "empty", "10.43.1.2", port{name: "http", port: 80, nodePort: 30002}, port{name: "udp", proto: corev1.ProtocolUDP, port: 9000})

	np := service("shop", "front", "10.43.1.3", port{port: 80, nodePort: 30080})
	npSl := endpointSlice("shop", "front", "front-1", []port{{port: 8080}}, ep{ip: "10.42.2.30"})

	local := service("shop", "kiosk", "10.43.1.4", port{port: 80, nodePort: 30081})
	local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	localSl := endpointSlice("shop", "kiosk", "kiosk-1", []port{{port: 8080}}, ep{ip: "10.42.1.40", node: "dev-a"}, ep{ip: "10.42.2.40"})

	remote := service("shop", "remote", "10.43.1.5", port{port: 80, nodePort: 30082})
	remote.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	remoteSl := endpointSlice("shop", "remote", "remote-1", []port{{port: 8080}}, ep{ip: "10.42.2.50"})

	// Rolling out: only terminating endpoints still serve.
	old := service("shop", "legacy", "10.43.1.6", port{port: 80})
	oldSl := endpointSlice("shop", "legacy", "legacy-1", []port{{port: 8080}},
		ep{ip: "10.42.2.60", terminating: true}, ep{ip: "10.42.2.61", terminating: true, notServing: true}, ep{ip: "10.42.2.62", notReady: true})

	headless := service("shop", "db", "None", port{port: 5432})
	external := service("shop", "mail", "", port{port: 25})
	external.Spec.Type = corev1.ServiceTypeExternalName

	return []*corev1.Service{web, dns, sticky, empty, np, local, remote, old, headless, external},
		[]*discoveryv1.EndpointSlice{webSl, dnsSl, stickySl, npSl, localSl, remoteSl, oldSl}
}

func TestRulesGolden(t *testing.T) {
	svcs, slices := fixture()
	// The default pod network: two ranges.
	got := buildRules([]string{"10.42.0.0/16", "10.64.0.0/10"}, buildModel("dev-a", svcs, slices)).String()
	golden := filepath.Join("testdata", "rules.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./agent/proxy -run TestRulesGolden -update)", err)
	}
	if got != string(want) {
		t.Errorf("rules differ from %s (rerun with -update after checking):\n%s", golden, lineDiff(string(want), got))
	}
}

func lineDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			out = append(out, "- "+x, "+ "+y)
		}
	}
	return strings.Join(out, "\n")
}

func TestProbability(t *testing.T) {
	for n, want := range map[int]string{2: "0.50000000000", 3: "0.33333333349", 4: "0.25000000000", 7: "0.14285714272"} {
		if got := probability(n); got != want {
			t.Errorf("probability(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestEndpointSelection(t *testing.T) {
	svcs, slices := fixture()
	ports := map[string]*servicePort{}
	for _, sp := range buildModel("dev-a", svcs, slices) {
		ports[sp.String()+"/"+string(sp.Protocol)] = sp
	}
	addrs := func(es []endpoint) string {
		var s []string
		for _, e := range es {
			s = append(s, e.addr())
		}
		return strings.Join(s, ",")
	}
	for _, c := range []struct{ key, cluster, local string }{
		{"default/web:http/TCP", "10.42.1.7:8080,10.42.1.8:8080,10.42.2.3:8080", ""},
		{"kube-system/dns:dns/UDP", "10.42.3.9:5353", ""},
		{"shop/legacy/TCP", "10.42.2.60:8080", ""},
		{"shop/kiosk/TCP", "10.42.1.40:8080,10.42.2.40:8080", "10.42.1.40:8080"},
		{"shop/remote/TCP", "10.42.2.50:8080", ""},
		{"shop/empty:http/TCP", "", ""},
	} {
		sp := ports[c.key]
		if sp == nil {
			t.Errorf("%s: no service port", c.key)
			continue
		}
		if got := addrs(sp.Cluster); got != c.cluster {
			t.Errorf("%s: cluster endpoints %q, want %q", c.key, got, c.cluster)
		}
		if got := addrs(sp.Local); got != c.local {
			t.Errorf("%s: local endpoints %q, want %q", c.key, got, c.local)
		}
	}
	for _, k := range []string{"shop/db/TCP", "shop/mail/TCP"} {
		if ports[k] != nil {
			t.Errorf("%s: headless and ExternalName services get no rules", k)
		}
	}
}

func TestChainNamesFit(t *testing.T) {
	sp := &servicePort{Namespace: strings.Repeat("n", 63), Name: strings.Repeat("s", 63), PortName: "p", Protocol: "TCP"}
	for _, n := range []string{svcChain(sp), xlbChain(sp), sepChain(sp, endpoint{IP: "10.42.0.1", Port: 1})} {
		if len(n) != 28 {
			t.Errorf("%s: %d characters, want 28 (the kernel's limit)", n, len(n))
		}
	}
	a := &servicePort{Namespace: "a", Name: "b", Protocol: "TCP"}
	b := &servicePort{Namespace: "a", Name: "b", Protocol: "UDP"}
	if svcChain(a) == svcChain(b) {
		t.Error("TCP and UDP ports of a service share a chain")
	}
}
