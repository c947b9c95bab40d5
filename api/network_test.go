package api

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

func TestPodNetworkOf(t *testing.T) {
	fallback := []string{ClusterCIDR}
	node := func(ann map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "shop-7", Annotations: ann}}
	}
	for _, tc := range []struct {
		name    string
		node    *corev1.Node
		want    string
		wantErr bool
	}{
		{"unknown node", nil, ClusterCIDR, false},
		{"no announcement", node(nil), ClusterCIDR, false},
		{"announced", node(map[string]string{AnnotationClusterCIDRs: ClusterCIDRs}), ClusterCIDRs, false},
		{"unreadable", node(map[string]string{AnnotationClusterCIDRs: "10.43.0.0/16"}), ClusterCIDR, true},
	} {
		got, err := PodNetworkOf(tc.node, fallback)
		if strings.Join(got, ",") != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%s: %v, %v; want %s (error %v)", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}
