package auth

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/hub/apiserver"
)

func TestGraphCountsReferences(t *testing.T) {
	g := NewGraph()
	mk := func(name, node, secret string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: corev1.PodSpec{NodeName: node,
			ImagePullSecrets: []corev1.LocalObjectReference{{Name: secret}},
			Containers: []corev1.Container{{Env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}}}}}}}
	}
	g.SetPod(mk("p1", "a", "s"))
	g.SetPod(mk("p2", "a", "s"))
	if !g.References("a", true, "ns", "s") || !g.References("a", false, "ns", "cm") {
		t.Fatal("references of a's pods not recorded")
	}
	if g.References("b", true, "ns", "s") || g.References("a", true, "other", "s") {
		t.Fatal("a reference leaked to another node or namespace")
	}
	g.DeletePod("ns", "p1")
	if !g.References("a", true, "ns", "s") {
		t.Fatal("deleting one of two pods dropped the shared reference")
	}
	// Moving a pod (a rebind after re-creation) moves its references.
	g.SetPod(mk("p2", "b", "s"))
	if g.References("a", true, "ns", "s") || !g.References("b", true, "ns", "s") || g.PodOnNode("a", "ns", "p2") || !g.PodOnNode("b", "ns", "p2") {
		t.Fatal("the references did not follow the pod")
	}
	g.SetPod(mk("p2", "", "s"))
	if g.References("b", true, "ns", "s") {
		t.Fatal("an unbound pod still grants its references")
	}
}

func TestAuthorizerRoles(t *testing.T) {
	z := &Authorizer{Nodes: &NodeAuthorizer{Graph: NewGraph(), Wait: 1}}
	ctx := context.Background()
	cases := []struct {
		user    *apiserver.UserInfo
		a       apiserver.Attributes
		allowed bool
		says    string
	}{
		{&apiserver.UserInfo{Name: "root", Groups: []string{GroupAdmins}}, apiserver.Attributes{Verb: "delete", Resource: "secrets"}, true, "admin"},
		{&apiserver.UserInfo{Name: "v", Groups: []string{GroupViewers}}, apiserver.Attributes{Verb: "list", Resource: "pods"}, true, "viewer"},
		{&apiserver.UserInfo{Name: "v", Groups: []string{GroupViewers}}, apiserver.Attributes{Verb: "get", Resource: "secrets"}, false, "except Secrets"},
		{&apiserver.UserInfo{Name: "v", Groups: []string{GroupViewers}}, apiserver.Attributes{Verb: "create", Resource: "pods", Subresource: "exec"}, false, "only read"},
		{&apiserver.UserInfo{Name: "v", Groups: []string{GroupViewers}}, apiserver.Attributes{Verb: "post", Path: "/join/v1/user"}, false, "only read"},
		{&apiserver.UserInfo{Name: "v", Groups: []string{GroupViewers}}, apiserver.Attributes{Verb: "get", Path: "/metrics"}, true, "viewer"},
		{&apiserver.UserInfo{Name: "v", Groups: []string{GroupViewers}}, apiserver.Attributes{Verb: "get", Path: "/debug/pprof/heap"}, false, "for admins"},
		{&apiserver.UserInfo{Name: "system:node:a", Groups: []string{GroupNodes}}, apiserver.Attributes{Verb: "post", Path: "/join/v1/renew"}, true, "renew"},
		{&apiserver.UserInfo{Name: "system:node:a", Groups: []string{GroupNodes}}, apiserver.Attributes{Verb: "get", Path: "/metrics"}, false, "node rule"},
		{&apiserver.UserInfo{Name: "mallory", Groups: []string{GroupNodes}}, apiserver.Attributes{Verb: "list", Resource: "nodes"}, false, "device identities"},
		{&apiserver.UserInfo{Name: "x"}, apiserver.Attributes{Verb: "get", Resource: "pods"}, false, "no role"},
		{nil, apiserver.Attributes{Verb: "get", Resource: "pods"}, false, "unauthenticated"},
	}
	for _, tc := range cases {
		tc.a.User = tc.user
		ok, reason, err := z.Authorize(ctx, tc.a)
		if err != nil || ok != tc.allowed || !strings.Contains(reason, tc.says) {
			t.Errorf("%v %s %s%s: allowed=%v reason=%q err=%v; want allowed=%v saying %q", tc.user, tc.a.Verb, tc.a.Resource, tc.a.Path, ok, reason, err, tc.allowed, tc.says)
		}
	}
}

func TestNodeLabelRules(t *testing.T) {
	cases := []struct {
		old, cur map[string]string
		ok       bool
	}{
		{nil, map[string]string{"kubernetes.io/hostname": "a", "kubernetes.io/arch": "arm64", "node.flotilla.dev/x": "1"}, true},
		{nil, map[string]string{"kubernetes.io/hostname": "b"}, false},
		{nil, map[string]string{"gpu": "true"}, false},
		{map[string]string{"site": "x"}, map[string]string{"site": "x", "node.flotilla.dev/y": "2"}, true},
		{map[string]string{"site": "x"}, map[string]string{}, false},
		{map[string]string{"site": "x"}, map[string]string{"site": "y"}, false},
		{map[string]string{"topology.kubernetes.io/zone": "z1"}, map[string]string{"topology.kubernetes.io/zone": "z2"}, false},
		// The autonomy label is an admin's, though under node.flotilla.dev/:
		// not at registration, not added, changed or removed.
		{nil, map[string]string{"node.flotilla.dev/autonomy": "true"}, false},
		{map[string]string{}, map[string]string{"node.flotilla.dev/autonomy": "true"}, false},
		{map[string]string{"node.flotilla.dev/autonomy": "false"}, map[string]string{"node.flotilla.dev/autonomy": "true"}, false},
		{map[string]string{"node.flotilla.dev/autonomy": "true"}, map[string]string{}, false},
		{map[string]string{"node.flotilla.dev/autonomy": "true"}, map[string]string{"node.flotilla.dev/autonomy": "true", "node.flotilla.dev/x": "1"}, true},
	}
	for _, tc := range cases {
		err := checkLabels("a", tc.old, tc.cur)
		if (err == nil) != tc.ok {
			t.Errorf("%v -> %v: err = %v, want ok=%v", tc.old, tc.cur, err, tc.ok)
		}
	}
}
