package nodelifecycle

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrCIDRsExhausted means every pod CIDR of the cluster range is taken.
var ErrCIDRsExhausted = errors.New("no pod CIDR left in the cluster range")

// cidrSet hands out the fixed-size subnets of an IPv4 cluster range and
// remembers which node holds which, so that none is given twice.
type cidrSet struct {
	cluster  netip.Prefix
	maskSize int
	owners   []string // by subnet index; "" when free
	byNode   map[string]int
	free     int
	next     int // where the next search starts: released subnets are reused last
}

func newCIDRSet(cluster string, maskSize int) (*cidrSet, error) {
	p, err := netip.ParsePrefix(cluster)
	if err != nil {
		return nil, fmt.Errorf("cluster CIDR %q: %w", cluster, err)
	}
	if !p.Addr().Is4() {
		return nil, fmt.Errorf("cluster CIDR %q: only IPv4 is supported", cluster)
	}
	if p.Masked() != p {
		return nil, fmt.Errorf("cluster CIDR %q has host bits set; did you mean %s?", cluster, p.Masked())
	}
	if maskSize < p.Bits() || maskSize > 30 || maskSize-p.Bits() > 20 {
		return nil, fmt.Errorf("node CIDR mask /%d does not fit cluster CIDR %s: use a mask between /%d and /30, at most 20 bits longer", maskSize, cluster, p.Bits())
	}
	n := 1 << (maskSize - p.Bits())
	return &cidrSet{cluster: p, maskSize: maskSize, owners: make([]string, n), byNode: map[string]int{}, free: n}, nil
}

func (s *cidrSet) prefix(i int) netip.Prefix {
	base := s.cluster.Addr().As4()
	v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	v += uint32(i) << (32 - s.maskSize)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), s.maskSize)
}

// index returns the subnet index of cidr, or an error when cidr is not one
// of the set's subnets.
func (s *cidrSet) index(cidr string) (int, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return 0, fmt.Errorf("pod CIDR %q: %w", cidr, err)
	}
	if p.Bits() != s.maskSize || p.Masked() != p || !s.cluster.Contains(p.Addr()) {
		return 0, fmt.Errorf("pod CIDR %s is not a /%d of the cluster range %s", p, s.maskSize, s.cluster)
	}
	base := s.cluster.Addr().As4()
	a := p.Addr().As4()
	off := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) -
		(uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3]))
	return int(off >> (32 - s.maskSize)), nil
}

// allocate gives node a free subnet, or the one it already holds: asking
// twice (say, before the informer shows the first answer written) must
// not cost a second subnet.
func (s *cidrSet) allocate(node string) (netip.Prefix, error) {
	if i, ok := s.byNode[node]; ok {
		return s.prefix(i), nil
	}
	if s.free == 0 {
		return netip.Prefix{}, fmt.Errorf("%w %s (%d subnets of /%d, all in use)", ErrCIDRsExhausted, s.cluster, len(s.owners), s.maskSize)
	}
	for k := range s.owners {
		i := (s.next + k) % len(s.owners)
		if s.owners[i] == "" {
			s.owners[i] = node
			s.byNode[node] = i
			s.free--
			s.next = (i + 1) % len(s.owners)
			return s.prefix(i), nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("%w %s", ErrCIDRsExhausted, s.cluster)
}

// occupy records that node holds cidr (as read back from a Node). It
// fails when cidr is outside the range or held by another node.
func (s *cidrSet) occupy(cidr, node string) error {
	i, err := s.index(cidr)
	if err != nil {
		return err
	}
	switch s.owners[i] {
	case node:
		return nil
	case "":
		if j, ok := s.byNode[node]; ok {
			// The node shows another subnet than the one handed to it
			// (written by someone else): the Node is the truth.
			s.owners[j] = ""
			s.free++
		}
		s.owners[i] = node
		s.byNode[node] = i
		s.free--
		return nil
	default:
		return fmt.Errorf("pod CIDR %s of node %s is already held by node %s", cidr, node, s.owners[i])
	}
}

// release frees cidr if node holds it.
func (s *cidrSet) release(cidr, node string) {
	i, err := s.index(cidr)
	if err != nil || s.owners[i] != node {
		return
	}
	s.owners[i] = ""
	delete(s.byNode, node)
	s.free++
}

// owner returns the node holding cidr, "" if none.
func (s *cidrSet) owner(cidr string) string {
	i, err := s.index(cidr)
	if err != nil {
		return ""
	}
	return s.owners[i]
}
