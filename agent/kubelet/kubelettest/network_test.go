package kubelettest

import (
	"context"
	"net"
	"testing"

	"flotilla.dev/flotilla/agent/cni"
)

func TestNetworkPrefixes(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		cidr  string
		first []string // the addresses of the first Setups
		full  bool     // then no address is left
	}{
		{DefaultPodCIDR, []string{"10.88.0.2", "10.88.0.3"}, false},
		{"10.42.7.0/24", []string{"10.42.7.2"}, false},
		{"10.244.0.0/16", []string{"10.244.0.2", "10.244.0.3"}, false},
		{"192.0.2.4/30", []string{"192.0.2.6"}, true},
	} {
		n, err := NewNetworkCIDR(tc.cidr)
		if err != nil {
			t.Fatalf("%s: %v", tc.cidr, err)
		}
		for i, want := range tc.first {
			ip, err := n.Setup(ctx, string(rune('a'+i)), "", cni.Attach{})
			if err != nil || ip.String() != want {
				t.Errorf("%s: Setup %d = %v, %v; want %s", tc.cidr, i, ip, err, want)
			}
		}
		if _, err := n.Setup(ctx, "last", "", cni.Attach{}); (err != nil) != tc.full {
			t.Errorf("%s: Setup once more: %v, want full=%v", tc.cidr, err, tc.full)
		}
		if err := n.Teardown(ctx, "a", ""); err != nil {
			t.Fatal(err)
		}
		if ip, err := n.Setup(ctx, "again", "", cni.Attach{IP: net.ParseIP(tc.first[0])}); err != nil || ip.String() != tc.first[0] {
			t.Errorf("%s: the freed address asked for: %v, %v", tc.cidr, ip, err)
		}
	}
	for _, bad := range []string{"10.0.0.0/31", "10.0.0.0/7", "fd00::/64", "nonsense"} {
		if _, err := NewNetworkCIDR(bad); err == nil {
			t.Errorf("NewNetworkCIDR(%s) accepted", bad)
		}
	}
}
