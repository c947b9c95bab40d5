package proxy

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

func benchObjects(n int) ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	var svcs []*corev1.Service
	var sls []*discoveryv1.EndpointSlice
	for i := range n {
		name := fmt.Sprintf("svc-%05d", i)
		svcs = append(svcs, service("bench", name, fmt.Sprintf("10.43.%d.%d", i/250, 1+i%250), port{name: "http", port: 80}))
		var eps []ep
		for e := range 3 {
			eps = append(eps, ep{ip: fmt.Sprintf("10.42.%d.%d", (i*3+e)/250%250, 1+(i*3+e)%250)})
		}
		sls = append(sls, endpointSlice("bench", name, name+"-x", []port{{name: "http", port: 8080}}, eps...))
	}
	return svcs, sls
}

// BenchmarkRender is the proxy's own share of a sync at 5,000 services:
// model, rules and the diff against what was written.
func BenchmarkRender(b *testing.B) {
	svcs, sls := benchObjects(5000)
	r := renderer{clusterCIDRs: []string{"10.42.0.0/16"}}
	first := r.render(buildModel("a", svcs, sls))
	have := written{}
	prev := map[string]*portRules{}
	for _, w := range diff(first, have, nil).Write {
		have[w.Key] = w.Sum
	}
	for _, pr := range first.ports {
		prev[pr.key] = pr
	}
	b.ResetTimer()
	for b.Loop() {
		want := r.render(buildModel("a", svcs, sls))
		if p := diff(want, have, prev); !p.empty() {
			b.Fatal("unexpected diff")
		}
	}
}
