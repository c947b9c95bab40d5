package api

import (
	"strings"
	"testing"
)

func TestParseClusterCIDRs(t *testing.T) {
	got, err := ParseClusterCIDRs(" 10.42.0.0/16, 10.64.0.0/10 ")
	if err != nil || len(got) != 2 || got[1].String() != "10.64.0.0/10" {
		t.Errorf("ParseClusterCIDRs = %v, %v", got, err)
	}
	for in, says := range map[string]string{
		"10.43.0.0/24":              "service range",
		"10.0.0.0/8":                "service range",
		"10.42.0.0/16,10.42.1.0/24": "overlap",
		"fd00::/64":                 "IPv4",
		"10.64.0.1/10":              "host bits",
		"":                          "no cluster CIDR",
		"10.42.0.0":                 "10.42.0.0",
	} {
		if _, err := ParseClusterCIDRs(in); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("ParseClusterCIDRs(%q) = %v, want an error saying %q", in, err, says)
		}
	}
}
