package nodelifecycle

import (
	"errors"
	"fmt"
	"testing"
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
