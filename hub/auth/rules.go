package auth

import (
	"slices"

	authorizationv1 "k8s.io/api/authorization/v1"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/apiserver"
)

var _ apiserver.RulesLister = (*Authorizer)(nil)

// reviewRules are what every authenticated client may do: ask about
// itself.
var reviewRules = []authorizationv1.ResourceRule{
	{Verbs: []string{"create"}, APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"selfsubjectaccessreviews", "selfsubjectrulesreviews"}},
	{Verbs: []string{"create"}, APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"selfsubjectreviews"}},
}

var readVerbList = []string{"get", "list", "watch"}

// RulesFor lists what u may do in namespace, as the Authorize rules
// decide it (kubectl auth can-i --list). A device's rules about its pods
// and the Secrets and ConfigMaps they use depend on which pods are bound
// to it: they are left out and the list is marked incomplete.
func (z *Authorizer) RulesFor(u *apiserver.UserInfo, namespace string) ([]authorizationv1.ResourceRule, []authorizationv1.NonResourceRule, bool) {
	if u == nil {
		return nil, nil, false
	}
	rules := slices.Clone(reviewRules)
	if slices.Contains(u.Groups, GroupAdmins) {
		return append(rules, authorizationv1.ResourceRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}),
			[]authorizationv1.NonResourceRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}}, false
	}
	var nonResource []authorizationv1.NonResourceRule
	incomplete := false
	if node := NodeName(u); node != "" {
		r, n := nodeRules(node, namespace)
		rules, nonResource, incomplete = append(rules, r...), append(nonResource, n...), true
	}
	if slices.Contains(u.Groups, GroupViewers) {
		rules = append(rules, viewerRules()...)
		nonResource = append(nonResource, authorizationv1.NonResourceRule{Verbs: []string{"get", "head"}, NonResourceURLs: []string{"*"}})
	}
	return rules, nonResource, incomplete
}

// viewerRules: read every served resource but Secrets, with the status,
// log and scale subresources.
func viewerRules() []authorizationv1.ResourceRule {
	byGroup := map[string][]string{}
	var groups []string
	for _, r := range api.Resources() {
		g, res := r.GVR.Group, r.GVR.Resource
		if g == "" && res == "secrets" {
			continue
		}
		if _, ok := byGroup[g]; !ok {
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], res)
		if r.HasStatus {
			byGroup[g] = append(byGroup[g], res+"/status")
		}
		switch r.Kind {
		case "Pod":
			byGroup[g] = append(byGroup[g], "pods/log")
		case "Deployment", "ReplicaSet":
			byGroup[g] = append(byGroup[g], res+"/scale")
		}
	}
	var out []authorizationv1.ResourceRule
	for _, g := range groups {
		out = append(out, authorizationv1.ResourceRule{Verbs: readVerbList, APIGroups: []string{g}, Resources: byGroup[g]})
	}
	return out
}

// nodeRules are a device's rules that do not depend on its pods (see
// NodeAuthorizer.Authorize).
func nodeRules(node, namespace string) ([]authorizationv1.ResourceRule, []authorizationv1.NonResourceRule) {
	rules := []authorizationv1.ResourceRule{
		{Verbs: readVerbList, APIGroups: []string{""}, Resources: []string{"services", "namespaces", "nodes", "nodes/status"}},
		{Verbs: readVerbList, APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}},
		{Verbs: []string{"create"}, APIGroups: []string{""}, Resources: []string{"nodes"}},
		{Verbs: []string{"update", "patch"}, APIGroups: []string{""}, Resources: []string{"nodes", "nodes/status"}, ResourceNames: []string{node}},
		{Verbs: []string{"create", "update", "patch"}, APIGroups: []string{""}, Resources: []string{"events"}},
		// Mirror pods of its static pods (NodeRestriction checks them).
		{Verbs: []string{"create"}, APIGroups: []string{""}, Resources: []string{"pods"}},
	}
	if namespace == api.NamespaceNodeLease {
		rules = append(rules,
			authorizationv1.ResourceRule{Verbs: []string{"create"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}},
			authorizationv1.ResourceRule{Verbs: []string{"get", "update", "patch"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{node}})
	}
	nonResource := []authorizationv1.NonResourceRule{
		{Verbs: []string{"get", "head"}, NonResourceURLs: []string{"/api", "/api/*", "/apis", "/apis/*", "/version", "/openapi/*"}},
		{Verbs: []string{"post"}, NonResourceURLs: []string{agentapi.PathRenew, agentapi.PathUsage}},
	}
	return rules, nonResource
}
