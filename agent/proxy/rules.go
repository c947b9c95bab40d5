package proxy

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Tables and chains the proxy writes.
const (
	tableNAT    = "nat"
	tableFilter = "filter"

	chainServices    = "FLOTILLA-SERVICES"
	chainNodePorts   = "FLOTILLA-NODEPORTS"
	chainPostrouting = "FLOTILLA-POSTROUTING"
	chainMarkMasq    = "FLOTILLA-MARK-MASQ"
	// chainMasqOutside marks for masquerade what does not come from the
	// pod network (the device itself, other hosts): the pod network may
	// be several ranges, and one rule can exclude only one.
	chainMasqOutside      = "FLOTILLA-MASQ-OUTSIDE"
	chainExternalServices = "FLOTILLA-EXTERNAL-SERVICES"
	chainForward          = "FLOTILLA-FORWARD"

	prefixSVC = "FLOTILLA-SVC-"
	prefixSEP = "FLOTILLA-SEP-"
	prefixXLB = "FLOTILLA-XLB-"

	// masqMark is the packet mark bit FLOTILLA-MARK-MASQ sets and
	// FLOTILLA-POSTROUTING masquerades; the same bit kube-proxy uses, so
	// the two never disagree on a device that has both.
	masqMark = "0x4000"
)

// chainKey names a chain in a table.
type chainKey struct{ Table, Chain string }

// ruleSet is the complete desired content of every chain the proxy owns:
// rule lines exactly as iptables-save prints them ("-A CHAIN ...").
type ruleSet map[chainKey][]string

func (rs ruleSet) add(table, chain string, rule string) {
	k := chainKey{table, chain}
	rs[k] = append(rs[k], "-A "+chain+" "+rule)
}

func (rs ruleSet) declare(table, chain string) {
	k := chainKey{table, chain}
	if _, ok := rs[k]; !ok {
		rs[k] = []string{}
	}
}

// keys returns the chains sorted by table then name.
func (rs ruleSet) keys() []chainKey {
	out := make([]chainKey, 0, len(rs))
	for k := range rs {
		out = append(out, k)
	}
	sortKeys(out)
	return out
}

// ownedChain reports whether the proxy owns a chain of that name; other
// FLOTILLA-* chains (the pod egress masquerade of agent/routes) are left
// alone by syncs.
func ownedChain(table, chain string) bool {
	switch chain {
	case chainServices:
		return table == tableNAT || table == tableFilter
	case chainNodePorts, chainPostrouting, chainMarkMasq, chainMasqOutside:
		return table == tableNAT
	case chainExternalServices, chainForward:
		return table == tableFilter
	}
	if table != tableNAT {
		return false
	}
	return strings.HasPrefix(chain, prefixSVC) || strings.HasPrefix(chain, prefixSEP) || strings.HasPrefix(chain, prefixXLB)
}

// baseChains always exist; jumps lists the rules in built-in chains that
// lead to them (inserted at the top, so that they run before other
// software's rules).
var baseChains = []chainKey{
	{tableNAT, chainServices}, {tableNAT, chainNodePorts}, {tableNAT, chainPostrouting}, {tableNAT, chainMarkMasq},
	{tableNAT, chainMasqOutside},
	{tableFilter, chainServices}, {tableFilter, chainExternalServices}, {tableFilter, chainForward},
}

type jump struct {
	Table, Chain string
	Rule         []string
}

var jumps = []jump{
	{tableNAT, "PREROUTING", []string{"-m", "comment", "--comment", "flotilla service portals", "-j", chainServices}},
	{tableNAT, "OUTPUT", []string{"-m", "comment", "--comment", "flotilla service portals", "-j", chainServices}},
	{tableNAT, "POSTROUTING", []string{"-m", "comment", "--comment", "flotilla postrouting rules", "-j", chainPostrouting}},
	{tableFilter, "INPUT", []string{"-m", "conntrack", "--ctstate", "NEW", "-m", "comment", "--comment", "flotilla externally-visible service portals", "-j", chainExternalServices}},
	{tableFilter, "FORWARD", []string{"-m", "conntrack", "--ctstate", "NEW", "-m", "comment", "--comment", "flotilla service portals", "-j", chainServices}},
	{tableFilter, "FORWARD", []string{"-m", "comment", "--comment", "flotilla forwarding rules", "-j", chainForward}},
	{tableFilter, "OUTPUT", []string{"-m", "conntrack", "--ctstate", "NEW", "-m", "comment", "--comment", "flotilla service portals", "-j", chainServices}},
}

// hashName is prefix + 15 base32 characters of a hash of parts: chain
// names are limited to 28 characters.
func hashName(prefix string, parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return prefix + base32.StdEncoding.EncodeToString(h[:])[:28-len(prefix)]
}

func svcChain(sp *servicePort) string {
	return hashName(prefixSVC, sp.String(), string(sp.Protocol))
}

func xlbChain(sp *servicePort) string {
	return hashName(prefixXLB, sp.String(), string(sp.Protocol))
}

func sepChain(sp *servicePort, e endpoint) string {
	return hashName(prefixSEP, sp.String(), string(sp.Protocol), e.addr())
}

// comment renders `-m comment --comment X` quoted the way iptables-save
// quotes it: only strings of letters, digits, '_' and '-' go bare.
func comment(s string) string {
	return "-m comment --comment " + quote(s)
}

func quote(s string) string {
	bare := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			bare = false
			break
		}
	}
	if bare {
		return s
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		if r == '"' || r == '\\' || r == '\'' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String()
}

// probability renders 1/n as iptables-save prints it: the kernel keeps
// the probability as a 31-bit fraction, printed with 11 decimals.
func probability(n int) string {
	p := uint32(float64(0x80000000)/float64(n) + 0.5)
	return strconv.FormatFloat(float64(p)/float64(0x80000000), 'f', 11, 64)
}

func proto(p corev1.Protocol) string { return strings.ToLower(string(p)) }

// dport is "-p tcp <extra> -m tcp --dport N".
func dport(p corev1.Protocol, extra string, port int32) string {
	pr := proto(p)
	s := "-p " + pr + " "
	if extra != "" {
		s += extra + " "
	}
	return s + "-m " + pr + " --dport " + strconv.Itoa(int(port))
}

func reject(p corev1.Protocol) string {
	if p == corev1.ProtocolTCP {
		return "-j REJECT --reject-with tcp-reset"
	}
	return "-j REJECT --reject-with icmp-port-unreachable"
}

// sharedChains collect one or two lines from many service ports.
var sharedChains = []chainKey{
	{tableNAT, chainServices}, {tableNAT, chainNodePorts},
	{tableFilter, chainServices}, {tableFilter, chainExternalServices},
}

func isShared(k chainKey) bool {
	for _, s := range sharedChains {
		if s == k {
			return true
		}
	}
	return false
}

// renderer renders rule sets, remembering each service port's rendering
// (and the hashes of its chains) so that a sync after a small change only
// renders the ports that changed.
type renderer struct {
	clusterCIDRs []string
	cache        map[string]*portRules
}

// portRules is one service port's part of the rules. A portRules is never
// modified after rendering: an unchanged port yields the same pointer.
type portRules struct {
	key, fp string
	// own are the chains only this port writes, with their hashes.
	own  []chainKey
	sums []uint64
	// rules holds the own chains and the port's lines of shared chains.
	rules ruleSet
}

// rendered is a whole rule set: the base chains (those of baseChains,
// shared by every port) complete, and each port's own chains.
type rendered struct {
	base     ruleSet
	baseSums map[chainKey]uint64
	ports    []*portRules
}

// all merges r into one ruleSet (tests, cleanup planning).
func (r rendered) all() ruleSet {
	rs := ruleSet{}
	for k, v := range r.base {
		rs[k] = v
	}
	for _, pr := range r.ports {
		for _, k := range pr.own {
			rs[k] = pr.rules[k]
		}
	}
	return rs
}

// buildRules renders the whole rule set for the service ports.
func buildRules(clusterCIDRs []string, ports []*servicePort) ruleSet {
	r := renderer{clusterCIDRs: clusterCIDRs}
	return r.render(ports).all()
}

// render renders the rules for ports, reusing the cached rendering of
// every port whose fingerprint did not change.
func (r *renderer) render(ports []*servicePort) rendered {
	rs := ruleSet{}
	for _, k := range baseChains {
		rs.declare(k.Table, k.Chain)
	}
	rs.add(tableNAT, chainMarkMasq, "-j MARK --set-xmark "+masqMark+"/"+masqMark)
	for _, c := range r.clusterCIDRs {
		rs.add(tableNAT, chainMasqOutside, "-s "+c+" "+comment("pod network")+" -j RETURN")
	}
	rs.add(tableNAT, chainMasqOutside, "-j "+chainMarkMasq)
	rs.add(tableNAT, chainPostrouting, "-m mark ! --mark "+masqMark+"/"+masqMark+" -j RETURN")
	// Clear the mark so that a packet that is looped back through
	// POSTROUTING is not masqueraded twice.
	rs.add(tableNAT, chainPostrouting, "-j MARK --set-xmark "+masqMark+"/0x0")
	rs.add(tableNAT, chainPostrouting, comment("flotilla service traffic requiring SNAT")+" -j MASQUERADE --random-fully")
	rs.add(tableFilter, chainForward, comment("flotilla forwarding rules")+" -m mark --mark "+masqMark+"/"+masqMark+" -j ACCEPT")
	rs.add(tableFilter, chainForward, comment("flotilla forwarding conntrack rule")+" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT")

	out := rendered{base: rs, ports: make([]*portRules, 0, len(ports))}
	next := make(map[string]*portRules, len(ports))
	for _, sp := range ports {
		fp := sp.fingerprint()
		pr := r.cache[sp.key]
		if pr == nil || pr.fp != fp {
			pr = renderPort(r.clusterCIDRs, sp)
			pr.key, pr.fp = sp.key, fp
		}
		next[sp.key] = pr
		out.ports = append(out.ports, pr)
		for _, k := range sharedChains {
			if lines := pr.rules[k]; len(lines) > 0 {
				rs[k] = append(rs[k], lines...)
			}
		}
	}
	r.cache = next
	// Last, so that a ClusterIP never falls through to a NodePort.
	rs.add(tableNAT, chainServices, comment("flotilla service nodeports; NOTE: this must be the last rule in this chain")+" -m addrtype --dst-type LOCAL -j "+chainNodePorts)
	out.baseSums = make(map[chainKey]uint64, len(baseChains))
	for _, k := range baseChains {
		out.baseSums[k] = chainHash(rs[k])
	}
	return out
}

// renderPort renders one service port's chains and shared-chain lines.
func renderPort(clusterCIDRs []string, sp *servicePort) *portRules {
	rs := ruleSet{}
	name := sp.String()
	clusterIP := sp.ClusterIP + "/32"
	finish := func() *portRules {
		pr := &portRules{rules: rs}
		for _, k := range rs.keys() {
			if !isShared(k) {
				pr.own = append(pr.own, k)
				pr.sums = append(pr.sums, chainHash(rs[k]))
			}
		}
		return pr
	}
	if len(sp.Cluster) == 0 {
		why := name + " has no endpoints"
		rs.add(tableFilter, chainServices, "-d "+clusterIP+" "+dport(sp.Protocol, comment(why), sp.Port)+" "+reject(sp.Protocol))
		if sp.NodePort != 0 {
			rs.add(tableFilter, chainExternalServices, dport(sp.Protocol, comment(why)+" -m addrtype --dst-type LOCAL", sp.NodePort)+" "+reject(sp.Protocol))
		}
		return finish()
	}
	svc := svcChain(sp)
	rs.add(tableNAT, chainServices, "-d "+clusterIP+" "+dport(sp.Protocol, comment(name+" cluster IP"), sp.Port)+" -j "+svc)
	// Off-pod-network clients (the device itself, other hosts) must see
	// replies come from the node that translated.
	rs.add(tableNAT, svc, "-d "+clusterIP+" "+dport(sp.Protocol, comment(name+" cluster IP"), sp.Port)+" -j "+chainMasqOutside)
	writeBalance(rs, svc, sp, sp.Cluster)
	for _, e := range sp.Cluster {
		writeEndpoint(rs, sp, e)
	}

	if sp.NodePort == 0 {
		return finish()
	}
	if !sp.LocalOnly {
		rs.add(tableNAT, chainNodePorts, dport(sp.Protocol, comment(name), sp.NodePort)+" -j "+chainMarkMasq)
		rs.add(tableNAT, chainNodePorts, dport(sp.Protocol, comment(name), sp.NodePort)+" -j "+svc)
		return finish()
	}
	if len(sp.Local) == 0 {
		// Local policy keeps the client's address, so it can only go
		// to endpoints here; with none, the packet is dropped and the
		// client's load balancer tries another device.
		rs.add(tableFilter, chainExternalServices, dport(sp.Protocol, comment(name+" has no local endpoints")+" -m addrtype --dst-type LOCAL", sp.NodePort)+" -j DROP")
		return finish()
	}
	xlb := xlbChain(sp)
	rs.add(tableNAT, chainNodePorts, dport(sp.Protocol, comment(name), sp.NodePort)+" -j "+xlb)
	for _, c := range clusterCIDRs {
		// Pods on this device may use any endpoint.
		rs.add(tableNAT, xlb, "-s "+c+" "+comment("pod traffic for "+name+" external destinations")+" -j "+svc)
	}
	writeBalance(rs, xlb, sp, sp.Local)
	for _, e := range sp.Local {
		if !containsEndpoint(sp.Cluster, e) {
			writeEndpoint(rs, sp, e)
		}
	}
	return finish()
}

func containsEndpoint(es []endpoint, e endpoint) bool {
	for _, x := range es {
		if x.addr() == e.addr() {
			return true
		}
	}
	return false
}

// writeBalance fills chain with the choice among eps: first the affinity
// checks (a client seen recently goes back to its endpoint), then one
// statistic rule per endpoint with probability 1/n, 1/(n-1), …, the last
// one unconditional, which gives each endpoint 1/n overall.
func writeBalance(rs ruleSet, chain string, sp *servicePort, eps []endpoint) {
	if sp.AffinitySeconds > 0 {
		for _, e := range eps {
			sep := sepChain(sp, e)
			rs.add(tableNAT, chain, comment(sp.String()+" -> "+e.addr())+" -m recent --rcheck --seconds "+strconv.Itoa(int(sp.AffinitySeconds))+" --reap --name "+sep+" --mask 255.255.255.255 --rsource -j "+sep)
		}
	}
	for i, e := range eps {
		sep := sepChain(sp, e)
		if left := len(eps) - i; left > 1 {
			rs.add(tableNAT, chain, comment(sp.String()+" -> "+e.addr())+" -m statistic --mode random --probability "+probability(left)+" -j "+sep)
		} else {
			rs.add(tableNAT, chain, comment(sp.String()+" -> "+e.addr())+" -j "+sep)
		}
	}
}

// writeEndpoint fills an endpoint chain: hairpin traffic (the endpoint
// reaching itself through the service) is masqueraded so the reply comes
// back through the translation; then the DNAT.
func writeEndpoint(rs ruleSet, sp *servicePort, e endpoint) {
	sep := sepChain(sp, e)
	rs.add(tableNAT, sep, "-s "+e.IP+"/32 "+comment(sp.String())+" -j "+chainMarkMasq)
	affinity := ""
	if sp.AffinitySeconds > 0 {
		affinity = " -m recent --set --name " + sep + " --mask 255.255.255.255 --rsource"
	}
	rs.add(tableNAT, sep, "-p "+proto(sp.Protocol)+" "+comment(sp.String())+affinity+" -m "+proto(sp.Protocol)+" -j DNAT --to-destination "+e.addr())
}

// render writes rs in iptables-restore format (all chains, every table),
// used for golden tests and Cleanup.
func (rs ruleSet) String() string {
	var b strings.Builder
	for _, t := range []string{tableFilter, tableNAT} {
		fmt.Fprintf(&b, "*%s\n", t)
		for _, k := range rs.keys() {
			if k.Table == t {
				fmt.Fprintf(&b, ":%s - [0:0]\n", k.Chain)
			}
		}
		for _, k := range rs.keys() {
			if k.Table == t {
				for _, r := range rs[k] {
					b.WriteString(r)
					b.WriteByte('\n')
				}
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}
