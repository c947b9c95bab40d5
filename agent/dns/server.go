package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
)

// ErrConfig is returned by New for a configuration that cannot work.
var ErrConfig = errors.New("invalid DNS configuration")

// Defaults.
const (
	DefaultClusterDomain = "cluster.local"
	DefaultTTL           = 5
	DefaultTimeout       = 2 * time.Second
)

// Config configures a Server.
type Config struct {
	// Listen is host:port (or a bare host, port 53): the pod bridge
	// address, e.g. 10.42.1.1. Required.
	Listen string
	// ClusterDomain is DefaultClusterDomain when empty.
	ClusterDomain string
	// Upstreams (host:port) answer every name outside the cluster domain;
	// ReadUpstreams("/etc/resolv.conf") when empty.
	Upstreams []string
	// Services and EndpointSlices are the agent's caches. Required.
	Services       corelisters.ServiceLister
	EndpointSlices discoverylisters.EndpointSliceLister
	// HasSynced, when set, says whether the caches are filled; until
	// then cluster names get SERVFAIL rather than a wrong NXDOMAIN.
	HasSynced func() bool
	// TTL of cluster answers in seconds (DefaultTTL).
	TTL uint32
	// Timeout per upstream attempt (DefaultTimeout).
	Timeout time.Duration
	// NetNSPath, when set, is the network namespace to listen in.
	NetNSPath string
	Log       *slog.Logger
}

// Server answers cluster names and forwards the rest.
type Server struct {
	cfg    Config
	log    *slog.Logger
	suffix string // "." + domain + "."

	mu    sync.Mutex
	ready chan struct{}
	addr  string
}

// New checks cfg; Run serves.
func New(cfg Config) (*Server, error) {
	if cfg.Listen == "" {
		return nil, fmt.Errorf("%w: Listen is required (the pod bridge address, e.g. 10.42.1.1)", ErrConfig)
	}
	if _, _, err := net.SplitHostPort(cfg.Listen); err != nil {
		cfg.Listen = net.JoinHostPort(cfg.Listen, "53")
	}
	host, _, _ := net.SplitHostPort(cfg.Listen)
	if net.ParseIP(host) == nil {
		return nil, fmt.Errorf("%w: Listen %q is not an IP address with an optional port", ErrConfig, cfg.Listen)
	}
	if cfg.Services == nil || cfg.EndpointSlices == nil {
		return nil, fmt.Errorf("%w: the Services and EndpointSlices listers are required", ErrConfig)
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = DefaultClusterDomain
	}
	cfg.ClusterDomain = strings.ToLower(strings.Trim(cfg.ClusterDomain, "."))
	if _, ok := dns.IsDomainName(cfg.ClusterDomain); !ok {
		return nil, fmt.Errorf("%w: ClusterDomain %q is not a domain name", ErrConfig, cfg.ClusterDomain)
	}
	if len(cfg.Upstreams) == 0 {
		up, err := ReadUpstreams("/etc/resolv.conf")
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		cfg.Upstreams = up
	}
	for i, u := range cfg.Upstreams {
		if _, _, err := net.SplitHostPort(u); err != nil {
			u = net.JoinHostPort(u, "53")
		}
		h, _, _ := net.SplitHostPort(u)
		if net.ParseIP(h) == nil {
			return nil, fmt.Errorf("%w: upstream %q is not an IP address with an optional port", ErrConfig, cfg.Upstreams[i])
		}
		cfg.Upstreams[i] = u
	}
	// Never forward to ourselves.
	cfg.Upstreams = removeString(cfg.Upstreams, cfg.Listen)
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Server{cfg: cfg, log: cfg.Log.With("component", "dns"), suffix: "." + cfg.ClusterDomain + ".", ready: make(chan struct{})}, nil
}

func removeString(list []string, s string) []string {
	out := list[:0]
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

// Ready is closed once the server listens; Addr then is its UDP and TCP
// address (useful with port 0).
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addr is the address the server listens on, once Ready.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Run serves UDP and TCP until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	var pc net.PacketConn
	var l net.Listener
	listen := func() error {
		lc := net.ListenConfig{Control: freebind}
		_, port, _ := net.SplitHostPort(s.cfg.Listen)
		for attempt := 0; ; attempt++ {
			var err error
			l, err = lc.Listen(ctx, "tcp", s.cfg.Listen)
			if err != nil {
				return err
			}
			// The same port for UDP as TCP got (it matters with port 0).
			pc, err = lc.ListenPacket(ctx, "udp", l.Addr().String())
			if err == nil {
				return nil
			}
			l.Close()
			// With port 0 the port TCP got may be taken for UDP: another.
			if port != "0" || attempt == 20 {
				return err
			}
		}
	}
	var err error
	if s.cfg.NetNSPath != "" {
		err = ns.WithNetNSPath(s.cfg.NetNSPath, func(ns.NetNS) error { return listen() })
	} else {
		err = listen()
	}
	if err != nil {
		return fmt.Errorf("dns: listen on %s: %w", s.cfg.Listen, err)
	}
	s.mu.Lock()
	s.addr = l.Addr().String()
	s.mu.Unlock()

	h := dns.HandlerFunc(s.serveDNS)
	servers := []*dns.Server{
		{PacketConn: pc, Handler: h},
		{Listener: l, Handler: h, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second},
	}
	errs := make(chan error, len(servers))
	var started sync.WaitGroup
	for _, srv := range servers {
		started.Add(1)
		srv.NotifyStartedFunc = started.Done
		go func() { errs <- srv.ActivateAndServe() }()
	}
	started.Wait()
	close(s.ready)
	s.log.Info("cluster DNS listening", "addr", s.addr, "domain", s.cfg.ClusterDomain, "upstreams", s.cfg.Upstreams)
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	for _, srv := range servers {
		_ = srv.Shutdown()
	}
	if err != nil {
		return fmt.Errorf("dns: serving on %s: %w", s.addr, err)
	}
	return nil
}

// freebind lets the server bind the bridge address before the bridge
// exists.
func freebind(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_IP, syscall.IP_FREEBIND, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

func (s *Server) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	if len(req.Question) != 1 || req.Opcode != dns.OpcodeQuery {
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeNotImplemented)
		_ = w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	name := strings.ToLower(dns.Fqdn(q.Name))
	if name != s.suffix[1:] && !strings.HasSuffix(name, s.suffix) {
		s.forward(w, req)
		return
	}
	m := s.answer(req, q, name)
	size := dns.MinMsgSize
	if opt := req.IsEdns0(); opt != nil {
		size = int(opt.UDPSize())
	}
	if w.LocalAddr().Network() == "udp" {
		m.Truncate(size)
	}
	_ = w.WriteMsg(m)
}

// answer resolves a name under the cluster domain.
func (s *Server) answer(req *dns.Msg, q dns.Question, name string) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = true
	if s.cfg.HasSynced != nil && !s.cfg.HasSynced() {
		m.Rcode = dns.RcodeServerFailure
		return m
	}
	labels := dns.SplitDomainName(strings.TrimSuffix(name, s.suffix))
	if name == s.suffix[1:] {
		labels = nil
	}
	rrs, exists, err := s.lookup(labels, q, name)
	if err != nil {
		s.log.Warn("answering a cluster name failed", "name", name, "err", err)
		m.Rcode = dns.RcodeServerFailure
		return m
	}
	switch {
	case !exists:
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{s.soa()}
	case len(rrs) == 0:
		m.Ns = []dns.RR{s.soa()}
	default:
		m.Answer = rrs
	}
	return m
}

// lookup returns the records for labels (the name without the domain) of
// type q.Qtype, and whether the name exists at all.
func (s *Server) lookup(l []string, q dns.Question, name string) ([]dns.RR, bool, error) {
	n := len(l)
	switch {
	case n == 0, n == 1 && (l[0] == "svc" || l[0] == "pod"):
		return nil, true, nil
	case n == 2 && (l[1] == "svc" || l[1] == "pod"):
		return nil, true, nil // a namespace
	case n == 3 && l[2] == "pod":
		ip, err := netip.ParseAddr(strings.ReplaceAll(l[0], "-", "."))
		if err != nil || !ip.Is4() {
			return nil, false, nil
		}
		return s.aRecords(q, name, []string{ip.String()}), true, nil
	case n == 3 && l[2] == "svc":
		return s.service(q, name, l[1], l[0])
	case n == 4 && l[3] == "svc":
		return s.endpointHost(q, name, l[2], l[1], l[0])
	case n == 5 && l[4] == "svc" && strings.HasPrefix(l[0], "_") && strings.HasPrefix(l[1], "_"):
		return s.srv(q, name, l[3], l[2], l[0][1:], l[1][1:])
	}
	return nil, false, nil
}

func (s *Server) getService(namespace, name string) (*corev1.Service, error) {
	svc, err := s.cfg.Services.Services(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return svc, err
}

func (s *Server) service(q dns.Question, name, namespace, svcName string) ([]dns.RR, bool, error) {
	svc, err := s.getService(namespace, svcName)
	if err != nil || svc == nil {
		return nil, false, err
	}
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		if svc.Spec.ExternalName == "" {
			return nil, true, nil
		}
		return []dns.RR{&dns.CNAME{Hdr: s.hdr(name, dns.TypeCNAME), Target: dns.Fqdn(svc.Spec.ExternalName)}}, true, nil
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		eps, err := s.readyEndpoints(namespace, svcName)
		if err != nil {
			return nil, true, err
		}
		ips := make([]string, 0, len(eps))
		for _, e := range eps {
			ips = append(ips, e.Addresses[0])
		}
		return s.aRecords(q, name, ips), true, nil
	case svc.Spec.ClusterIP != "":
		return s.aRecords(q, name, []string{svc.Spec.ClusterIP}), true, nil
	}
	return nil, true, nil
}

func (s *Server) endpointHost(q dns.Question, name, namespace, svcName, host string) ([]dns.RR, bool, error) {
	eps, err := s.readyEndpoints(namespace, svcName)
	if err != nil {
		return nil, false, err
	}
	var ips []string
	for _, e := range eps {
		if e.Hostname != nil && strings.EqualFold(*e.Hostname, host) {
			ips = append(ips, e.Addresses[0])
		}
	}
	if len(ips) == 0 {
		return nil, false, nil
	}
	return s.aRecords(q, name, ips), true, nil
}

func (s *Server) srv(q dns.Question, name, namespace, svcName, portName, proto string) ([]dns.RR, bool, error) {
	svc, err := s.getService(namespace, svcName)
	if err != nil || svc == nil {
		return nil, false, err
	}
	for _, p := range svc.Spec.Ports {
		pr := p.Protocol
		if pr == "" {
			pr = corev1.ProtocolTCP
		}
		if p.Name != portName || !strings.EqualFold(string(pr), proto) {
			continue
		}
		if q.Qtype != dns.TypeSRV && q.Qtype != dns.TypeANY {
			return nil, true, nil
		}
		target := svcName + "." + namespace + ".svc" + s.suffix
		return []dns.RR{&dns.SRV{Hdr: s.hdr(name, dns.TypeSRV), Priority: 0, Weight: 100, Port: uint16(p.Port), Target: target}}, true, nil
	}
	return nil, false, nil
}

// readyEndpoints are the ready IPv4 endpoints of a service, deduplicated.
func (s *Server) readyEndpoints(namespace, svcName string) ([]discoveryv1.Endpoint, error) {
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svcName})
	slices, err := s.cfg.EndpointSlices.EndpointSlices(namespace).List(sel)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []discoveryv1.Endpoint
	for _, sl := range slices {
		if sl.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		for _, e := range sl.Endpoints {
			if len(e.Addresses) == 0 || (e.Conditions.Ready != nil && !*e.Conditions.Ready) || seen[e.Addresses[0]] {
				continue
			}
			seen[e.Addresses[0]] = true
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addresses[0] < out[j].Addresses[0] })
	return out, nil
}

func (s *Server) aRecords(q dns.Question, name string, ips []string) []dns.RR {
	if q.Qtype != dns.TypeA && q.Qtype != dns.TypeANY {
		return nil
	}
	var out []dns.RR
	for _, ip := range ips {
		if a := net.ParseIP(ip).To4(); a != nil {
			out = append(out, &dns.A{Hdr: s.hdr(name, dns.TypeA), A: a})
		}
	}
	return out
}

func (s *Server) hdr(name string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: s.cfg.TTL}
}

func (s *Server) soa() dns.RR {
	zone := s.suffix[1:]
	return &dns.SOA{Hdr: s.hdr(zone, dns.TypeSOA), Ns: "ns.dns." + zone, Mbox: "hostmaster." + zone,
		Serial: 1, Refresh: 7200, Retry: 1800, Expire: 86400, Minttl: s.cfg.TTL}
}

// forward asks the upstreams in turn over the transport the client used.
func (s *Server) forward(w dns.ResponseWriter, req *dns.Msg) {
	network := "udp"
	if _, ok := w.LocalAddr().(*net.TCPAddr); ok {
		network = "tcp"
	}
	c := &dns.Client{Net: network, Timeout: s.cfg.Timeout}
	var lastErr error
	for _, up := range s.cfg.Upstreams {
		resp, _, err := c.Exchange(req, up)
		if err != nil {
			lastErr = err
			continue
		}
		resp.Id = req.Id
		_ = w.WriteMsg(resp)
		return
	}
	s.log.Debug("forwarding failed", "name", req.Question[0].Name, "upstreams", s.cfg.Upstreams, "err", lastErr)
	m := new(dns.Msg)
	m.SetRcode(req, dns.RcodeServerFailure)
	_ = w.WriteMsg(m)
}
