package kubelettest

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"sort"
	"sync"

	"flotilla.dev/flotilla/agent/cni"
	"flotilla.dev/flotilla/agent/kubelet"
)

var _ kubelet.Network = (*Network)(nil)

// DefaultPodCIDR is the pod network of NewNetwork.
const DefaultPodCIDR = "10.88.0.0/24"

// Attachment is a pod's place on the fake pod network.
type Attachment struct {
	IP    net.IP
	NetNS string
	Ports []cni.PortMapping
}

// Network is an in-memory kubelet.Network: Setup hands out addresses of
// an IPv4 prefix (from the second host address; the first is the
// gateway; never the broadcast address) and Teardown gives them back.
type Network struct {
	faults

	mu        sync.Mutex
	subnet    *net.IPNet
	size      uint32 // addresses in subnet
	attached  map[string]Attachment
	used      map[uint32]bool // by offset in subnet
	setups    map[string]int
	teardowns map[string]int
}

// NewNetwork returns a fake network on DefaultPodCIDR.
func NewNetwork() *Network {
	n, err := NewNetworkCIDR(DefaultPodCIDR)
	if err != nil {
		panic(err)
	}
	return n
}

// NewNetworkCIDR returns a fake network on an IPv4 prefix from /8 to /30
// (a node's pod CIDR: the hub gives each a /24).
func NewNetworkCIDR(cidr string) (*Network, error) {
	ip, subnet, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil, err
	}
	ones, bits := subnet.Mask.Size()
	if ip.To4() == nil || bits != 32 || ones < 8 || ones > 30 {
		return nil, fmt.Errorf("kubelettest: pod network %s is not an IPv4 prefix from /8 to /30", cidr)
	}
	subnet.IP = subnet.IP.To4()
	return &Network{
		subnet: subnet, size: 1 << (32 - ones), attached: map[string]Attachment{}, used: map[uint32]bool{},
		setups: map[string]int{}, teardowns: map[string]int{},
	}, nil
}

// CIDR is the pod network's prefix.
func (n *Network) CIDR() string { return n.subnet.String() }

// offset is ip's place in the subnet (ip must be in it).
func (n *Network) offset(ip net.IP) uint32 {
	return binary.BigEndian.Uint32(ip.To4()) - binary.BigEndian.Uint32(n.subnet.IP)
}

func (n *Network) at(offset uint32) net.IP {
	ip := make(net.IP, 4)
	binary.BigEndian.PutUint32(ip, binary.BigEndian.Uint32(n.subnet.IP)+offset)
	return ip
}

// Setup attaches the pod and returns its address; a pod already attached
// keeps its address.
func (n *Network) Setup(_ context.Context, podID, netnsPath string, at cni.Attach) (net.IP, error) {
	if err := n.enter("Setup"); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.setups[podID]++
	if a, ok := n.attached[podID]; ok {
		return slices.Clone(a.IP), nil
	}
	if want := at.IP.To4(); want != nil && n.subnet.Contains(want) && !n.used[n.offset(want)] {
		n.used[n.offset(want)] = true
		n.attached[podID] = Attachment{IP: slices.Clone(want), NetNS: netnsPath, Ports: slices.Clone(at.Ports)}
		return slices.Clone(want), nil
	}
	for host := uint32(2); host < n.size-1; host++ {
		if n.used[host] {
			continue
		}
		ip := n.at(host)
		n.used[host] = true
		n.attached[podID] = Attachment{IP: ip, NetNS: netnsPath, Ports: slices.Clone(at.Ports)}
		return slices.Clone(ip), nil
	}
	return nil, fmt.Errorf("kubelettest: no address left in %s for pod %s", n.subnet, podID)
}

// Teardown detaches the pod and frees its address; a pod not attached is
// not an error (as CNI DEL).
func (n *Network) Teardown(_ context.Context, podID, _ string) error {
	if err := n.enter("Teardown"); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.teardowns[podID]++
	if a, ok := n.attached[podID]; ok {
		delete(n.used, n.offset(a.IP))
		delete(n.attached, podID)
	}
	return nil
}

// Attach records a pod as attached with ip, as one left by an earlier
// agent (no Setup is counted).
func (n *Network) Attach(podID string, ip net.IP) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	ip4 := ip.To4()
	if ip4 == nil || !n.subnet.Contains(ip4) {
		return fmt.Errorf("kubelettest: %s is not in %s", ip, n.subnet)
	}
	if n.used[n.offset(ip4)] {
		return fmt.Errorf("kubelettest: %s is in use", ip)
	}
	n.used[n.offset(ip4)] = true
	n.attached[podID] = Attachment{IP: slices.Clone(ip4)}
	return nil
}

// Attachment returns the pod's attachment, if it is attached.
func (n *Network) Attachment(podID string) (Attachment, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	a, ok := n.attached[podID]
	a.IP, a.Ports = slices.Clone(a.IP), slices.Clone(a.Ports)
	return a, ok
}

// Attached returns the IDs of the attached pods, sorted.
func (n *Network) Attached() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.attached))
	for id := range n.attached {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Setups is how many times Setup ran for the pod (calls failed with an
// injected error are not counted here; Calls counts every call).
func (n *Network) Setups(podID string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.setups[podID]
}

// Teardowns is how many times Teardown ran for the pod (calls failed
// with an injected error are not counted here; Calls counts every call).
func (n *Network) Teardowns(podID string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.teardowns[podID]
}
