package nodelifecycle

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"flotilla.dev/flotilla/api"
)

func TestCIDRSetAllocatesEachSubnetOnce(t *testing.T) {
	s, err := newCIDRSet("10.42.0.0/16", 24)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := range 256 {
		p, err := s.allocate(fmt.Sprintf("n%d", i))
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		if seen[p.String()] {
			t.Fatalf("%s handed out twice", p)
		}
		seen[p.String()] = true
	}
	if !seen["10.42.0.0/24"] || !seen["10.42.255.0/24"] {
		t.Errorf("range not covered: first/last missing")
	}
	if _, err := s.allocate("extra"); !errors.Is(err, ErrCIDRsExhausted) {
		t.Fatalf("257th allocation: %v, want ErrCIDRsExhausted", err)
	}
	s.release("10.42.7.0/24", "someone-else")
	if _, err := s.allocate("extra"); err == nil {
		t.Fatal("release by a non-owner freed the subnet")
	}
	s.release("10.42.7.0/24", "n7")
	p, err := s.allocate("extra")
	if err != nil || p.String() != "10.42.7.0/24" {
		t.Fatalf("after release got %v, %v", p, err)
	}
}

func TestCIDRSetAllocateIsIdempotentPerNode(t *testing.T) {
	s, _ := newCIDRSet("10.42.0.0/16", 24)
	a, _ := s.allocate("a")
	again, _ := s.allocate("a")
	if a != again {
		t.Fatalf("second allocation for the same node gave %s, then %s", a, again)
	}
	if s.free != 255 {
		t.Fatalf("%d free, want 255", s.free)
	}
}

func TestCIDRSetReusesReleasedLast(t *testing.T) {
	s, _ := newCIDRSet("10.42.0.0/16", 24)
	a, _ := s.allocate("a")
	s.release(a.String(), "a")
	b, _ := s.allocate("b")
	if a == b {
		t.Fatalf("released %s reused at once while others are free", a)
	}
}

func TestCIDRSetOccupy(t *testing.T) {
	s, _ := newCIDRSet("10.42.0.0/16", 24)
	if err := s.occupy("10.42.0.0/24", "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.occupy("10.42.0.0/24", "a"); err != nil {
		t.Fatalf("re-occupying own subnet: %v", err)
	}
	if err := s.occupy("10.42.0.0/24", "b"); err == nil {
		t.Fatal("two nodes occupied one subnet")
	}
	for _, bad := range []string{"10.43.0.0/24", "10.42.0.0/25", "10.42.0.1/24", "nonsense"} {
		if err := s.occupy(bad, "c"); err == nil {
			t.Errorf("occupy(%q) accepted", bad)
		}
	}
	p, _ := s.allocate("c")
	if p.String() == "10.42.0.0/24" {
		t.Fatal("allocated an occupied subnet")
	}
	if s.owner("10.42.0.0/24") != "a" {
		t.Fatal("owner lost")
	}
}

func TestNewCIDRSetRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		cidr string
		mask int
	}{{"10.42.0.0/16", 15}, {"10.42.0.0/16", 31}, {"10.42.0.1/16", 24}, {"fd00::/64", 80}, {"x", 24}, {"10.0.0.0/8", 30}} {
		if _, err := newCIDRSet(tc.cidr, tc.mask); err == nil {
			t.Errorf("newCIDRSet(%q, %d) accepted", tc.cidr, tc.mask)
		}
	}
}

// TestDefaultRangesHoldTheFleet: the default ranges give 16,640 devices
// each its own /24 — 10.42.0.0/16 first, as fleets before had them —
// none in the service range, and then say the pool is full.
func TestDefaultRangesHoldTheFleet(t *testing.T) {
	s, err := newCIDRSet(api.ClusterCIDRs, 24)
	if err != nil {
		t.Fatal(err)
	}
	svc := netip.MustParsePrefix(api.ServiceCIDR)
	seen := map[netip.Prefix]bool{}
	const fleet = 256 + 16384
	for i := range fleet {
		p, err := s.allocate(fmt.Sprintf("device-%05d", i))
		if err != nil {
			t.Fatalf("device %d: %v", i, err)
		}
		if seen[p] || p.Overlaps(svc) || p.Bits() != 24 {
			t.Fatalf("device %d got %s (seen before %v, in the service range %v)", i, p, seen[p], p.Overlaps(svc))
		}
		seen[p] = true
		if i < 256 && !netip.MustParsePrefix("10.42.0.0/16").Contains(p.Addr()) {
			t.Fatalf("device %d got %s: the first 256 come from 10.42.0.0/16", i, p)
		}
		if j, err := s.index(p.String()); err != nil || s.prefix(j) != p {
			t.Fatalf("%s: index %d (%v) does not map back", p, j, err)
		}
	}
	if _, err := s.allocate("one-too-many"); !errors.Is(err, ErrCIDRsExhausted) || !strings.Contains(err.Error(), "--cluster-cidr") {
		t.Errorf("past %d devices: err = %v, want ErrCIDRsExhausted naming --cluster-cidr", fleet, err)
	}
	// A subnet of the second range is recognized as held, and freed.
	s.release("10.64.0.0/24", "device-00256")
	if p, err := s.allocate("newcomer"); err != nil || p.String() != "10.64.0.0/24" {
		t.Errorf("after a release, allocate = %v, %v; want 10.64.0.0/24", p, err)
	}
}
