package dns

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"strings"
)

// PodSearches is the search list of a pod in namespace ns, as Kubernetes
// writes it for dnsPolicy ClusterFirst.
func PodSearches(ns, clusterDomain string) []string {
	return []string{ns + ".svc." + clusterDomain, "svc." + clusterDomain, clusterDomain}
}

// PodOptions are the resolver options of ClusterFirst pods: names with
// fewer than five dots are tried with the search list first.
var PodOptions = []string{"ndots:5"}

// PodResolvConf renders the resolv.conf of a ClusterFirst pod in
// namespace ns whose DNS servers are servers (the cluster DNS address).
func PodResolvConf(ns, clusterDomain string, servers []string) string {
	var b strings.Builder
	for _, s := range servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	fmt.Fprintf(&b, "search %s\n", strings.Join(PodSearches(ns, clusterDomain), " "))
	fmt.Fprintf(&b, "options %s\n", strings.Join(PodOptions, " "))
	return b.String()
}

// ReadUpstreams returns the nameservers of a resolv.conf as host:port.
func ReadUpstreams(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("dns: read upstream resolvers: %w", err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "nameserver" {
			ip := strings.SplitN(f[1], "%", 2)[0]
			if net.ParseIP(ip) == nil {
				continue
			}
			out = append(out, net.JoinHostPort(ip, "53"))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("dns: %s lists no nameserver; set the agent's DNS upstreams", path)
	}
	return out, nil
}
