package auth

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/fields"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/apiserver"
)

// NodeAuthorizer decides what a device (user system:node:NAME in group
// system:nodes) may do. Every refusal names the rule that refused.
type NodeAuthorizer struct {
	Graph *Graph
	// Wait bounds how long a refusal that depends on the graph waits for
	// the graph to catch up (default one second).
	Wait time.Duration
}

// NewNodeAuthorizer returns an authorizer over g.
func NewNodeAuthorizer(g *Graph) *NodeAuthorizer { return &NodeAuthorizer{Graph: g, Wait: time.Second} }

var readVerbs = map[string]bool{"get": true, "list": true, "watch": true}

// Authorize decides a request of device node.
func (z *NodeAuthorizer) Authorize(ctx context.Context, node string, a apiserver.Attributes) (bool, string) {
	if a.Resource == "" {
		return authorizeNodePath(a)
	}
	gr := a.Resource
	if a.APIGroup != "" {
		gr = a.Resource + "." + a.APIGroup
	}
	switch gr {
	case "services", "endpointslices.discovery.k8s.io", "namespaces":
		if readVerbs[a.Verb] && a.Subresource == "" {
			return true, "node: read " + a.Resource
		}
		return false, fmt.Sprintf("node rule: devices may only read (get, list, watch) %s", a.Resource)
	case "nodes":
		return authorizeNodeObject(node, a)
	case "leases.coordination.k8s.io":
		return authorizeLease(node, a)
	case "events":
		switch a.Verb {
		case "create", "update", "patch":
			return true, "node: write events"
		}
		return false, "node rule: devices may create events, not " + a.Verb + " them"
	case "pods":
		return z.authorizePod(ctx, node, a)
	case "secrets", "configmaps":
		return z.authorizeReferenced(ctx, node, a)
	}
	return false, fmt.Sprintf("node rule: devices have no access to %s", gr)
}

// authorizeNodePath lets devices read discovery and renew their
// certificate; nothing else outside the REST resources.
func authorizeNodePath(a apiserver.Attributes) (bool, string) {
	if a.Verb == "get" || a.Verb == "head" {
		p := a.Path
		if p == "/api" || p == "/apis" || p == "/version" || strings.HasPrefix(p, "/api/") || strings.HasPrefix(p, "/apis/") || strings.HasPrefix(p, "/openapi/") {
			return true, "node: discovery"
		}
	}
	// hub/join serves the device's renewal there.
	if a.Verb == "post" && a.Path == agentapi.PathRenew {
		return true, "node: renew its certificate"
	}
	// The report is stored as the certificate's device's, whatever it says.
	if a.Verb == "post" && a.Path == agentapi.PathUsage {
		return true, "node: report its usage"
	}
	return false, fmt.Sprintf("node rule: devices may read discovery and POST %s and %s, not %s %s", agentapi.PathRenew, agentapi.PathUsage, strings.ToUpper(a.Verb), a.Path)
}

func authorizeNodeObject(node string, a apiserver.Attributes) (bool, string) {
	if readVerbs[a.Verb] && (a.Subresource == "" || a.Subresource == "status") {
		return true, "node: read nodes"
	}
	switch a.Verb {
	case "create":
		if a.Subresource == "" {
			// The name is in the body: NodeRestriction checks it.
			return true, "node: register its own Node"
		}
	case "update", "patch":
		if a.Subresource != "" && a.Subresource != "status" {
			break
		}
		if a.Name == node {
			return true, "node: update its own Node"
		}
		return false, fmt.Sprintf("node rule: device %s may change only its own Node, not %q", node, a.Name)
	}
	return false, fmt.Sprintf("node rule: devices may read Nodes and create or update their own, not %s %s", a.Verb, subject("nodes", a))
}

func authorizeLease(node string, a apiserver.Attributes) (bool, string) {
	if a.Namespace != api.NamespaceNodeLease {
		return false, fmt.Sprintf("node rule: device leases live in the namespace %s", api.NamespaceNodeLease)
	}
	switch a.Verb {
	case "create":
		return true, "node: create its own Lease"
	case "get", "update", "patch":
		if a.Name == node {
			return true, "node: its own Lease"
		}
		return false, fmt.Sprintf("node rule: device %s may use only the Lease named after it, not %q", node, a.Name)
	}
	return false, fmt.Sprintf("node rule: devices may get, create and update their own Lease, not %s leases", a.Verb)
}

func (z *NodeAuthorizer) authorizePod(ctx context.Context, node string, a apiserver.Attributes) (bool, string) {
	name := a.Name
	switch {
	case a.Subresource == "" && (a.Verb == "list" || a.Verb == "watch" || a.Verb == "get"),
		a.Subresource == "status" && (a.Verb == "get" || a.Verb == "update" || a.Verb == "patch"),
		a.Subresource == "" && a.Verb == "delete":
		if name == "" {
			sel, err := fields.ParseSelector(apiserver.FieldSelectorFrom(ctx))
			if err == nil {
				if v, ok := sel.RequiresExactMatch("spec.nodeName"); ok && v == node {
					return true, "node: list and watch its own pods"
				}
				if v, ok := sel.RequiresExactMatch("metadata.name"); ok && a.Namespace != "" {
					name = v
				}
			}
			if name == "" {
				return false, fmt.Sprintf("node rule: devices may list and watch only their own pods (fieldSelector spec.nodeName=%s)", node)
			}
		}
		if z.bound(ctx, node, a.Namespace, name) {
			return true, "node: pod bound to it"
		}
		return false, fmt.Sprintf("node rule: device %s may %s only pods bound to it, and pod %s/%s is not", node, verbPhrase(a), a.Namespace, name)
	case a.Subresource == "" && a.Verb == "create":
		// Only mirror pods, checked by NodeRestriction on the object.
		return true, "node: create mirror pods of its static pods"
	}
	return false, fmt.Sprintf("node rule: devices may read their pods, write their status, create mirror pods and finish deleting their pods, not %s %s", a.Verb, subject("pods", a))
}

func (z *NodeAuthorizer) bound(ctx context.Context, node, ns, name string) bool {
	check := func() bool { return z.Graph.PodOnNode(node, ns, name) }
	return check() || z.Graph.waitFor(ctx, z.wait(), check)
}

func (z *NodeAuthorizer) wait() time.Duration {
	if z.Wait <= 0 {
		return time.Second
	}
	return z.Wait
}

// authorizeReferenced lets a device get (or watch by name) a Secret or
// ConfigMap that one of its pods references, and nothing else of them.
func (z *NodeAuthorizer) authorizeReferenced(ctx context.Context, node string, a apiserver.Attributes) (bool, string) {
	kind := "Secrets"
	if a.Resource == "configmaps" {
		kind = "ConfigMaps"
	}
	name := a.Name
	if a.Subresource != "" || !readVerbs[a.Verb] {
		return false, fmt.Sprintf("node rule: devices may only read %s, and only those their pods reference", kind)
	}
	if name == "" {
		if sel, err := fields.ParseSelector(apiserver.FieldSelectorFrom(ctx)); err == nil && a.Namespace != "" {
			name, _ = sel.RequiresExactMatch("metadata.name")
		}
		if name == "" {
			return false, fmt.Sprintf("node rule: devices may not list %s; they get each one their pods reference by name", kind)
		}
	}
	secret := a.Resource == "secrets"
	check := func() bool { return z.Graph.References(node, secret, a.Namespace, name) }
	if check() || z.Graph.waitFor(ctx, z.wait(), check) {
		return true, "node: referenced by a pod bound to it"
	}
	return false, fmt.Sprintf("node rule: device %s may read only the %s its pods reference, and no pod bound to it references %s/%s",
		node, kind, a.Namespace, name)
}

func verbPhrase(a apiserver.Attributes) string {
	if a.Subresource != "" {
		return a.Verb + " the " + a.Subresource + " of"
	}
	return a.Verb
}

func subject(res string, a apiserver.Attributes) string {
	s := res
	if a.Subresource != "" {
		s += "/" + a.Subresource
	}
	if a.Name != "" {
		s += " " + a.Name
	}
	return s
}
