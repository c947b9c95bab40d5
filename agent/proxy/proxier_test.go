package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/agent/hubclient/fromclientset"
	"flotilla.dev/flotilla/api"
)

type harness struct {
	t      *testing.T
	client *fake.Clientset
	ipt    *fakeIPTables
	ct     *fakeConntrack
	p      *Proxier
}

func newHarness(t *testing.T, ipt *fakeIPTables, objs ...runtime.Object) *harness {
	t.Helper()
	h := &harness{t: t, client: fake.NewClientset(objs...), ipt: ipt, ct: &fakeConntrack{}}
	if h.ipt == nil {
		h.ipt = newFakeIPTables()
	}
	p, err := New(Config{NodeName: "dev-a", Client: fromclientset.New(h.client), IPTables: h.ipt, Conntrack: h.ct,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), p.hasSynced...) {
		t.Fatal("caches did not sync")
	}
	h.p = p
	return h
}

func fixtureObjects() []runtime.Object {
	svcs, sls := fixture()
	var out []runtime.Object
	for _, s := range svcs {
		out = append(out, s)
	}
	for _, s := range sls {
		out = append(out, s)
	}
	return out
}

// sync runs one sync and fails the test on error.
func (h *harness) sync(full bool) SyncResult {
	h.t.Helper()
	res := h.p.Sync(context.Background(), full)
	if res.Err != nil {
		h.t.Fatal(res.Err)
	}
	return res
}

// until waits for the informer cache to reflect a change.
func (h *harness) until(cond func() bool) {
	h.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			h.t.Fatal("the informer cache never showed the change")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFirstSyncWritesEverythingOnce(t *testing.T) {
	h := newHarness(t, nil, fixtureObjects()...)
	res := h.sync(true)
	if res.Restores != 1 || len(h.ipt.restores) != 1 {
		t.Fatalf("first sync: %d restores, want 1", len(h.ipt.restores))
	}
	saved, _ := h.ipt.Save(context.Background(), "nat", "filter")
	svcs, sls := fixture()
	want := buildRules([]string{api.ClusterCIDR}, buildModel("dev-a", svcs, sls))
	tables, err := parseSave(saved)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range want.keys() {
		if got := tables[k.Table].Rules[k.Chain]; !slices.Equal(got, want[k]) {
			t.Errorf("%s/%s in the kernel:\n%s\nwant:\n%s", k.Table, k.Chain, strings.Join(got, "\n"), strings.Join(want[k], "\n"))
		}
	}
	for _, j := range jumps {
		line := "-A " + j.Chain + " " + canonicalArgs(j.Rule)
		if !slices.Contains(tables[j.Table].Rules[j.Chain], line) {
			t.Errorf("missing jump %q in %s", line, j.Table)
		}
	}
	// Nothing changed: nothing written, not even with a full resync.
	if res := h.sync(false); res.Restores != 0 {
		t.Errorf("idle sync ran iptables-restore: %+v", res)
	}
	if res := h.sync(true); res.Restores != 0 {
		t.Errorf("idle full resync ran iptables-restore: %+v\n%s", res, h.ipt.restores[len(h.ipt.restores)-1])
	}
}

func TestRestartRewritesNothing(t *testing.T) {
	h := newHarness(t, nil, fixtureObjects()...)
	h.sync(true)
	before, _ := h.ipt.Save(context.Background(), "nat", "filter")
	n := len(h.ipt.restores)

	// A new proxier (an agent restart) on the same kernel.
	h2 := newHarness(t, h.ipt, fixtureObjects()...)
	if res := h2.sync(true); res.Restores != 0 || len(h.ipt.restores) != n {
		t.Fatalf("restart with unchanged services ran iptables-restore: %+v", res)
	}
	after, _ := h.ipt.Save(context.Background(), "nat", "filter")
	if string(before) != string(after) {
		t.Errorf("tables changed across a restart:\n%s", lineDiff(string(before), string(after)))
	}
}

func TestEndpointChangeRewritesOnlyThatService(t *testing.T) {
	h := newHarness(t, nil, fixtureObjects()...)
	h.sync(true)
	ctx := context.Background()

	// web loses 10.42.2.3 (its readiness).
	sl, _ := h.client.DiscoveryV1().EndpointSlices("default").Get(ctx, "web-1", metav1.GetOptions{})
	for i := range sl.Endpoints {
		if sl.Endpoints[i].Addresses[0] == "10.42.2.3" {
			sl.Endpoints[i].Conditions.Ready = ptr(false)
		}
	}
	sl.ResourceVersion = "2"
	if _, err := h.client.DiscoveryV1().EndpointSlices("default").Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.until(func() bool {
		got, _ := h.p.slices.EndpointSlices("default").Get("web-1")
		return got.ResourceVersion == "2"
	})
	res := h.sync(false)
	if res.Restores != 1 || res.ChainsWritten != 1 || res.ChainsDeleted != 1 {
		t.Fatalf("want the web chain rewritten and one endpoint chain deleted, got %+v", res)
	}
	payload := string(h.ipt.restores[len(h.ipt.restores)-1])
	web := svcChain(&servicePort{Namespace: "default", Name: "web", PortName: "http", Protocol: "TCP"})
	gone := sepChain(&servicePort{Namespace: "default", Name: "web", PortName: "http", Protocol: "TCP"}, endpoint{IP: "10.42.2.3", Port: 8080})
	for _, want := range []string{":" + web + " - [0:0]", "-X " + gone, "--probability 0.50000000000"} {
		if !strings.Contains(payload, want) {
			t.Errorf("payload lacks %q:\n%s", want, payload)
		}
	}
	if strings.Contains(payload, ":FLOTILLA-SERVICES") || strings.Contains(payload, "*filter") {
		t.Errorf("payload rewrote chains that did not change:\n%s", payload)
	}
	if strings.Contains(payload, "10.42.2.3:8080") {
		t.Errorf("the unready endpoint is still a target:\n%s", payload)
	}
}

func TestServiceLosingAllEndpointsRejects(t *testing.T) {
	h := newHarness(t, nil, fixtureObjects()...)
	h.sync(true)
	ctx := context.Background()
	if err := h.client.DiscoveryV1().EndpointSlices("kube-system").Delete(ctx, "dns-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.until(func() bool { _, err := h.p.slices.EndpointSlices("kube-system").Get("dns-1"); return err != nil })
	h.sync(false)
	saved, _ := h.ipt.Save(ctx, "filter", "nat")
	s := string(saved)
	for _, want := range []string{
		`-A FLOTILLA-SERVICES -d 10.43.0.53/32 -p udp -m comment --comment "kube-system/dns:dns has no endpoints" -m udp --dport 53 -j REJECT --reject-with icmp-port-unreachable`,
		`-A FLOTILLA-SERVICES -d 10.43.0.53/32 -p tcp -m comment --comment "kube-system/dns:dns-tcp has no endpoints" -m tcp --dport 53 -j REJECT --reject-with tcp-reset`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q", want)
		}
	}
	if strings.Contains(s, "10.43.0.53/32 -p udp -m comment --comment \"kube-system/dns:dns cluster IP\"") {
		t.Error("the service without endpoints still has a DNAT path")
	}
	// The UDP endpoint's flows are flushed.
	want := FlowFilter{OrigDst: "10.43.0.53", OrigDstPort: 53, DstNAT: "10.42.3.9"}
	if !slices.Contains(h.ct.flows, want) {
		t.Errorf("conntrack flushes %+v, want %+v", h.ct.flows, want)
	}
	// TCP flows are never flushed: TCP endpoints close their own.
	if len(h.ct.flows) != 1 {
		t.Errorf("conntrack flushes %+v, want only the UDP one", h.ct.flows)
	}
}

func TestFullResyncRepairsTampering(t *testing.T) {
	h := newHarness(t, nil, fixtureObjects()...)
	h.sync(true)
	// Someone flushes a service chain and adds a stray proxy chain.
	web := svcChain(&servicePort{Namespace: "default", Name: "web", PortName: "http", Protocol: "TCP"})
	h.ipt.tables["nat"].Rules[web] = []string{}
	stray := hashName(prefixSVC, "gone/svc")
	h.ipt.tables["nat"].Chains = append(h.ipt.tables["nat"].Chains, stray)
	h.ipt.tables["nat"].Rules[stray] = []string{"-A " + stray + " -j RETURN"}
	// Routes' chain is not the proxy's and must survive.
	h.ipt.tables["nat"].Chains = append(h.ipt.tables["nat"].Chains, "FLOTILLA-EGRESS")
	h.ipt.tables["nat"].Rules["FLOTILLA-EGRESS"] = []string{"-A FLOTILLA-EGRESS -j RETURN"}

	if res := h.sync(false); res.Restores != 0 {
		t.Fatalf("a partial sync cannot see tampering and should write nothing, got %+v", res)
	}
	res := h.sync(true)
	if res.ChainsWritten != 1 || res.ChainsDeleted != 1 {
		t.Fatalf("full resync: %+v, want one chain repaired and one deleted", res)
	}
	if len(h.ipt.tables["nat"].Rules[web]) == 0 {
		t.Error("the flushed chain was not repaired")
	}
	if _, ok := h.ipt.tables["nat"].Rules[stray]; ok {
		t.Error("the stray chain survived")
	}
	if _, ok := h.ipt.tables["nat"].Rules["FLOTILLA-EGRESS"]; !ok {
		t.Error("the proxy deleted a chain it does not own")
	}
}

func TestFailedRestoreForcesReadBack(t *testing.T) {
	h := newHarness(t, nil, fixtureObjects()...)
	h.ipt.failNext = errors.New("boom")
	if res := h.p.Sync(context.Background(), true); res.Err == nil {
		t.Fatal("the restore failure was not reported")
	}
	res := h.sync(false)
	if !res.Full || res.Restores != 1 {
		t.Errorf("sync after a failure: %+v, want a full sync that writes", res)
	}
}

func TestCleanupRemovesEverything(t *testing.T) {
	h := newHarness(t, nil, fixtureObjects()...)
	h.sync(true)
	h.ipt.tables["nat"].Chains = append(h.ipt.tables["nat"].Chains, "FLOTILLA-EGRESS")
	h.ipt.tables["nat"].Rules["FLOTILLA-EGRESS"] = []string{"-A FLOTILLA-EGRESS -j RETURN"}
	h.ipt.tables["nat"].Rules["POSTROUTING"] = append(h.ipt.tables["nat"].Rules["POSTROUTING"], "-A POSTROUTING -j FLOTILLA-EGRESS", "-A POSTROUTING -j MASQUERADE")
	if err := CleanupWith(context.Background(), h.ipt); err != nil {
		t.Fatal(err)
	}
	if left := h.ipt.flotillaChains(); len(left) > 0 {
		t.Errorf("left after cleanup: %q", left)
	}
	if got := h.ipt.tables["nat"].Rules["POSTROUTING"]; !slices.Equal(got, []string{"-A POSTROUTING -j MASQUERADE"}) {
		t.Errorf("other software's rules were touched: %q", got)
	}
	n := len(h.ipt.restores)
	if err := CleanupWith(context.Background(), h.ipt); err != nil || len(h.ipt.restores) != n {
		t.Errorf("a second cleanup: err %v, %d restores (want none)", err, len(h.ipt.restores)-n)
	}
}

func TestRunSyncsOnChanges(t *testing.T) {
	client := fake.NewClientset(fixtureObjects()...)
	ipt := newFakeIPTables()
	results := make(chan SyncResult, 100)
	p, err := New(Config{NodeName: "dev-a", Client: fromclientset.New(client), IPTables: ipt, Conntrack: &fakeConntrack{},
		MinSyncInterval: time.Millisecond, OnSync: func(r SyncResult) { results <- r },
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	next := func() SyncResult {
		select {
		case r := <-results:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("no sync")
			return SyncResult{}
		}
	}
	if r := next(); !r.Full || r.Restores != 1 || r.Err != nil {
		t.Fatalf("first sync %+v", r)
	}
	svc := service("default", "new", "10.43.9.9", port{port: 80})
	if _, err := client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		r := next()
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		saved, _ := ipt.Save(ctx, "filter")
		if strings.Contains(string(saved), "10.43.9.9/32") {
			break
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestStaleFlows(t *testing.T) {
	udp := func(eps ...string) *servicePort {
		sp := &servicePort{Namespace: "a", Name: "dns", Protocol: corev1.ProtocolUDP, ClusterIP: "10.43.0.53", Port: 53, NodePort: 30053}
		for _, e := range eps {
			sp.Cluster = append(sp.Cluster, endpoint{IP: e, Port: 5353})
		}
		return sp
	}
	cases := []struct {
		name     string
		old, cur []*servicePort
		want     []FlowFilter
	}{
		{"unchanged", []*servicePort{udp("10.42.0.1")}, []*servicePort{udp("10.42.0.1")}, nil},
		{"endpoint gone", []*servicePort{udp("10.42.0.1", "10.42.0.2")}, []*servicePort{udp("10.42.0.2")},
			[]FlowFilter{{OrigDst: "10.43.0.53", OrigDstPort: 53, DstNAT: "10.42.0.1"}, {OrigDstPort: 30053, DstNAT: "10.42.0.1"}}},
		{"first endpoint", []*servicePort{udp()}, []*servicePort{udp("10.42.0.1")},
			[]FlowFilter{{OrigDst: "10.43.0.53", OrigDstPort: 53}, {OrigDstPort: 30053}}},
		{"service gone", []*servicePort{udp("10.42.0.1")}, nil,
			[]FlowFilter{{OrigDst: "10.43.0.53", OrigDstPort: 53, DstNAT: "10.42.0.1"}}},
	}
	for _, c := range cases {
		if got := staleFlows(c.old, c.cur); !slices.Equal(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	client := fake.NewClientset()
	for _, c := range []Config{
		{Client: fromclientset.New(client)},
		{NodeName: "a"},
		{NodeName: "a", Client: fromclientset.New(client), ClusterCIDR: "10.42.0.0"},
		{NodeName: "a", Client: fromclientset.New(client), NodeIP: "dev-a"},
	} {
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", c, err)
		}
	}
}

// TestPodNetworkFromTheNode: the pod ranges the hub announces on this
// device's Node are the pod network the rules exclude from masquerade,
// and a change of them is followed.
func TestPodNetworkFromTheNode(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dev-a",
		Annotations: map[string]string{api.AnnotationClusterCIDRs: "10.42.0.0/16,10.64.0.0/10"}}}
	h := newHarness(t, nil, append(fixtureObjects(), node)...)
	h.sync(true)
	outside := func() []string { return h.ipt.tables["nat"].Rules[chainMasqOutside] }
	want := []string{
		`-A FLOTILLA-MASQ-OUTSIDE -s 10.42.0.0/16 -m comment --comment "pod network" -j RETURN`,
		`-A FLOTILLA-MASQ-OUTSIDE -s 10.64.0.0/10 -m comment --comment "pod network" -j RETURN`,
		`-A FLOTILLA-MASQ-OUTSIDE -j FLOTILLA-MARK-MASQ`,
	}
	if !slices.Equal(outside(), want) {
		t.Fatalf("FLOTILLA-MASQ-OUTSIDE = %q, want %q", outside(), want)
	}
	node.Annotations[api.AnnotationClusterCIDRs] = "10.99.0.0/16"
	if _, err := h.client.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.until(func() bool {
		n, err := h.p.nodes.Get("dev-a")
		return err == nil && n.Annotations[api.AnnotationClusterCIDRs] == "10.99.0.0/16"
	})
	h.sync(false)
	if got := outside(); len(got) != 2 || !strings.Contains(got[0], "-s 10.99.0.0/16") {
		t.Errorf("after the ranges changed, FLOTILLA-MASQ-OUTSIDE = %q", got)
	}
}
