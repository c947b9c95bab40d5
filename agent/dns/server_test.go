package dns

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

func ptr[T any](v T) *T { return &v }

func objects() []runtime.Object {
	svc := func(ns, name, ip string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	}
	ext := svc("default", "mail", "")
	ext.Spec.Type, ext.Spec.ExternalName = corev1.ServiceTypeExternalName, "smtp.example.org"
	ready := func(ip, host string, ok bool) discoveryv1.Endpoint {
		e := discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(ok)}}
		if host != "" {
			e.Hostname = ptr(host)
		}
		return e
	}
	return []runtime.Object{
		svc("default", "web", "10.43.0.10"),
		svc("other", "web", "10.43.0.20"),
		svc("default", "db", corev1.ClusterIPNone),
		ext,
		&discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "db-1", Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{ready("10.42.1.5", "db-0", true), ready("10.42.2.5", "db-1", true), ready("10.42.3.5", "db-2", false)},
		},
	}
}

type env struct {
	srv      *Server
	addr     string
	upstream string
}

// startUpstream runs a resolver on loopback that knows example.org.
func startUpstream(t *testing.T) string {
	t.Helper()
	// UDP and TCP on one port: the port UDP got may be taken for TCP by
	// another test's listener, then another is tried.
	var pc net.PacketConn
	var l net.Listener
	for attempt := 0; ; attempt++ {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if l, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		if attempt == 20 {
			t.Fatal(err)
		}
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if strings.EqualFold(r.Question[0].Name, "example.org.") && r.Question[0].Qtype == dns.TypeA {
			rr, _ := dns.NewRR("example.org. 60 IN A 192.0.2.1")
			m.Answer = []dns.RR{rr}
		} else {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: l, Handler: h}} {
		go func() { _ = s.ActivateAndServe() }()
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	return pc.LocalAddr().String()
}

func start(t *testing.T, synced func() bool) *env {
	t.Helper()
	client := fake.NewClientset(objects()...)
	f := informers.NewSharedInformerFactory(client, 0)
	svcs, sls := f.Core().V1().Services(), f.Discovery().V1().EndpointSlices()
	svcs.Informer()
	sls.Informer()
	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	up := startUpstream(t)
	s, err := New(Config{Listen: "127.0.0.1:0", Upstreams: []string{up}, Services: svcs.Lister(), EndpointSlices: sls.Lister(),
		HasSynced: synced, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatal(err)
	}
	return &env{srv: s, addr: s.Addr(), upstream: up}
}

func (e *env) ask(t *testing.T, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Net: network, Timeout: 3 * time.Second}
	r, _, err := c.Exchange(m, e.addr)
	if err != nil {
		t.Fatalf("%s %s: %v", name, dns.TypeToString[qtype], err)
	}
	return r
}

func answers(r *dns.Msg) []string {
	var out []string
	for _, rr := range r.Answer {
		switch v := rr.(type) {
		case *dns.A:
			out = append(out, v.A.String())
		case *dns.CNAME:
			out = append(out, "CNAME "+v.Target)
		case *dns.SRV:
			out = append(out, "SRV "+v.Target+" "+itoa(v.Port))
		}
	}
	slices.Sort(out)
	return out
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o644) }

func TestClusterNames(t *testing.T) {
	e := start(t, nil)
	for _, c := range []struct {
		name  string
		qtype uint16
		rcode int
		want  []string
	}{
		{"web.default.svc.cluster.local", dns.TypeA, dns.RcodeSuccess, []string{"10.43.0.10"}},
		{"WEB.Default.svc.cluster.local", dns.TypeA, dns.RcodeSuccess, []string{"10.43.0.10"}},
		{"web.other.svc.cluster.local", dns.TypeA, dns.RcodeSuccess, []string{"10.43.0.20"}},
		{"db.default.svc.cluster.local", dns.TypeA, dns.RcodeSuccess, []string{"10.42.1.5", "10.42.2.5"}},
		{"db-1.db.default.svc.cluster.local", dns.TypeA, dns.RcodeSuccess, []string{"10.42.2.5"}},
		{"db-2.db.default.svc.cluster.local", dns.TypeA, dns.RcodeNameError, nil},
		{"mail.default.svc.cluster.local", dns.TypeA, dns.RcodeSuccess, []string{"CNAME smtp.example.org."}},
		{"_http._tcp.web.default.svc.cluster.local", dns.TypeSRV, dns.RcodeSuccess, []string{"SRV web.default.svc.cluster.local. 80"}},
		{"_http._udp.web.default.svc.cluster.local", dns.TypeSRV, dns.RcodeNameError, nil},
		{"10-42-1-7.default.pod.cluster.local", dns.TypeA, dns.RcodeSuccess, []string{"10.42.1.7"}},
		{"web.default.svc.cluster.local", dns.TypeAAAA, dns.RcodeSuccess, nil},
		{"missing.default.svc.cluster.local", dns.TypeA, dns.RcodeNameError, nil},
		{"web.default.cluster.local", dns.TypeA, dns.RcodeNameError, nil},
		{"default.svc.cluster.local", dns.TypeA, dns.RcodeSuccess, nil},
	} {
		for _, network := range []string{"udp", "tcp"} {
			r := e.ask(t, network, c.name, c.qtype)
			if r.Rcode != c.rcode || !slices.Equal(answers(r), c.want) {
				t.Errorf("%s %s over %s: %s %v, want %s %v", c.name, dns.TypeToString[c.qtype], network,
					dns.RcodeToString[r.Rcode], answers(r), dns.RcodeToString[c.rcode], c.want)
			}
			if !r.Authoritative {
				t.Errorf("%s: cluster answers must be authoritative", c.name)
			}
			if len(r.Answer) == 0 && len(r.Ns) == 0 {
				t.Errorf("%s: a negative answer without SOA cannot be cached", c.name)
			}
		}
	}
}

func TestForwarding(t *testing.T) {
	e := start(t, nil)
	for _, network := range []string{"udp", "tcp"} {
		if r := e.ask(t, network, "example.org", dns.TypeA); r.Rcode != dns.RcodeSuccess || !slices.Equal(answers(r), []string{"192.0.2.1"}) {
			t.Errorf("forwarded over %s: %s %v", network, dns.RcodeToString[r.Rcode], answers(r))
		}
		if r := e.ask(t, network, "nowhere.example.org", dns.TypeA); r.Rcode != dns.RcodeNameError {
			t.Errorf("upstream NXDOMAIN over %s came back as %s", network, dns.RcodeToString[r.Rcode])
		}
	}
}

func TestUpstreamDownIsServfail(t *testing.T) {
	client := fake.NewClientset()
	f := informers.NewSharedInformerFactory(client, 0)
	l, _ := net.ListenPacket("udp", "127.0.0.1:0")
	dead := l.LocalAddr().String()
	l.Close()
	s, err := New(Config{Listen: "127.0.0.1:0", Upstreams: []string{dead}, Timeout: 200 * time.Millisecond,
		Services: f.Core().V1().Services().Lister(), EndpointSlices: f.Discovery().V1().EndpointSlices().Lister(),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Run(ctx) }()
	<-s.Ready()
	e := &env{srv: s, addr: s.Addr()}
	if r := e.ask(t, "udp", "example.org", dns.TypeA); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("with no upstream answering: %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
}

func TestNotSyncedIsServfail(t *testing.T) {
	e := start(t, func() bool { return false })
	if r := e.ask(t, "udp", "web.default.svc.cluster.local", dns.TypeA); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("before the caches sync: %s, want SERVFAIL (never a false NXDOMAIN)", dns.RcodeToString[r.Rcode])
	}
}

func TestPodResolvConf(t *testing.T) {
	got := PodResolvConf("shop", "cluster.local", []string{"10.42.1.1"})
	want := "nameserver 10.42.1.1\nsearch shop.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"
	if got != want {
		t.Errorf("PodResolvConf:\n%s\nwant:\n%s", got, want)
	}
}

// TestSearchPath resolves short names the way a pod's stub resolver does
// with PodResolvConf's search list and ndots:5, against the server.
func TestSearchPath(t *testing.T) {
	e := start(t, nil)
	resolve := func(ns, name string) []string {
		var candidates []string
		if strings.Count(name, ".") < 5 {
			for _, s := range PodSearches(ns, "cluster.local") {
				candidates = append(candidates, name+"."+s)
			}
		}
		candidates = append(candidates, name)
		for _, c := range candidates {
			if r := e.ask(t, "udp", c, dns.TypeA); r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 {
				return answers(r)
			}
		}
		return nil
	}
	for _, c := range []struct {
		ns, name string
		want     []string
	}{
		{"default", "web", []string{"10.43.0.10"}},
		{"other", "web", []string{"10.43.0.20"}},
		{"default", "web.other", []string{"10.43.0.20"}},
		{"default", "web.other.svc", []string{"10.43.0.20"}},
		{"default", "db", []string{"10.42.1.5", "10.42.2.5"}},
		{"default", "example.org", []string{"192.0.2.1"}},
		{"default", "nope", nil},
	} {
		if got := resolve(c.ns, c.name); !slices.Equal(got, c.want) {
			t.Errorf("%q from namespace %s: %v, want %v", c.name, c.ns, got, c.want)
		}
	}
}

func TestReadUpstreams(t *testing.T) {
	p := t.TempDir() + "/resolv.conf"
	if err := writeFile(p, "# comment\nnameserver 192.0.2.53\nnameserver fe80::1%eth0\nsearch example.org\nnameserver bogus\n"); err != nil {
		t.Fatal(err)
	}
	got, err := ReadUpstreams(p)
	if err != nil || !slices.Equal(got, []string{"192.0.2.53:53", "[fe80::1]:53"}) {
		t.Errorf("ReadUpstreams = %v, %v", got, err)
	}
	if err := writeFile(p, "search x\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadUpstreams(p); err == nil {
		t.Error("a resolv.conf without nameservers was accepted")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	f := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	sl, el := f.Core().V1().Services().Lister(), f.Discovery().V1().EndpointSlices().Lister()
	for _, c := range []Config{
		{Services: sl, EndpointSlices: el, Upstreams: []string{"192.0.2.1"}},
		{Listen: "bridge", Services: sl, EndpointSlices: el, Upstreams: []string{"192.0.2.1"}},
		{Listen: "10.42.1.1", Upstreams: []string{"192.0.2.1"}},
		{Listen: "10.42.1.1", Services: sl, EndpointSlices: el, Upstreams: []string{"dns.example.org"}},
	} {
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", c, err)
		}
	}
}
