package nodelifecycle

import (
	"errors"
	"fmt"
	"net/netip"

	"flotilla.dev/flotilla/api"
)

// ErrCIDRsExhausted means every pod CIDR of the cluster ranges is taken.
var ErrCIDRsExhausted = errors.New("no pod CIDR left in the cluster ranges")

// cidrSet hands out the fixed-size subnets of one or more IPv4 cluster
// ranges, in the order given, and remembers which node holds which, so
// that none is given twice. Subnets are numbered across the ranges: the
// first range's, then the next's.
type cidrSet struct {
	ranges   []netip.Prefix
	starts   []int // the number of each range's first subnet
	maskSize int
	owners   []string // by subnet number; "" when free
	byNode   map[string]int
	free     int
	next     int // where the next search starts: released subnets are reused last
}

func newCIDRSet(clusters string, maskSize int) (*cidrSet, error) {
	ranges, err := api.ParseClusterCIDRs(clusters)
	if err != nil {
		return nil, err
	}
	s := &cidrSet{ranges: ranges, maskSize: maskSize, byNode: map[string]int{}}
	n := 0
	for _, p := range ranges {
		if maskSize < p.Bits() || maskSize > 30 || maskSize-p.Bits() > 20 {
			return nil, fmt.Errorf("node CIDR mask /%d does not fit cluster CIDR %s: use a mask between /%d and /30, at most 20 bits longer", maskSize, p, p.Bits())
		}
		s.starts = append(s.starts, n)
		n += 1 << (maskSize - p.Bits())
	}
	s.owners, s.free = make([]string, n), n
	return s, nil
}

// String names the ranges, as --cluster-cidr takes them.
func (s *cidrSet) String() string { return api.JoinCIDRs(s.ranges) }

func (s *cidrSet) prefix(i int) netip.Prefix {
	r := len(s.starts) - 1
	for r > 0 && s.starts[r] > i {
		r--
	}
	base := s.ranges[r].Addr().As4()
	v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	v += uint32(i-s.starts[r]) << (32 - s.maskSize)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), s.maskSize)
}

// index returns the subnet number of cidr, or an error when cidr is not
// one of the set's subnets.
func (s *cidrSet) index(cidr string) (int, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return 0, fmt.Errorf("pod CIDR %q: %w", cidr, err)
	}
	if p.Bits() == s.maskSize && p.Masked() == p {
		for r, c := range s.ranges {
			if !c.Contains(p.Addr()) {
				continue
			}
			base := c.Addr().As4()
			a := p.Addr().As4()
			off := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) -
				(uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3]))
			return s.starts[r] + int(off>>(32-s.maskSize)), nil
		}
	}
	return 0, fmt.Errorf("pod CIDR %s is not a /%d of the cluster ranges %s", p, s.maskSize, s)
}

// allocate gives node a free subnet, or the one it already holds: asking
// twice (say, before the informer shows the first answer written) must
// not cost a second subnet.
func (s *cidrSet) allocate(node string) (netip.Prefix, error) {
	if i, ok := s.byNode[node]; ok {
		return s.prefix(i), nil
	}
	if s.free == 0 {
		return netip.Prefix{}, fmt.Errorf("%w %s (%d subnets of /%d, all in use); add a range to --cluster-cidr", ErrCIDRsExhausted, s, len(s.owners), s.maskSize)
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
	return netip.Prefix{}, fmt.Errorf("%w %s", ErrCIDRsExhausted, s)
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
