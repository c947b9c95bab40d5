package auth

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"flotilla.dev/flotilla/hub/apiserver"
)

// Groups and names that carry a role.
const (
	GroupAdmins  = apiserver.GroupAdmins // admin: everything
	GroupViewers = "flotilla:viewers"    // viewer: read everything but Secrets
	GroupNodes   = apiserver.GroupNodes  // node: see NodeAuthorizer
	NodePrefix   = apiserver.NodeUserPrefix

	RoleAdmin  = "admin"
	RoleViewer = "viewer"
)

// AnnotationClientKey on a Node records the public key (sha256 of its
// SubjectPublicKeyInfo) of the device that holds the name. A join with
// another key is refused until an admin deletes the Node.
const AnnotationClientKey = "flotilla.dev/client-key-sha256"

// AnnotationPreviousClientKey on a Node records the key its device renewed
// away from, until the next renewal: a device whose renewal answer was
// lost retries with its old certificate and the same new key, and gets a
// certificate instead of a refusal.
const AnnotationPreviousClientKey = "flotilla.dev/previous-client-key-sha256"

// KeyFingerprint is the value AnnotationClientKey holds for a certificate
// or CSR's SubjectPublicKeyInfo.
func KeyFingerprint(rawSPKI []byte) string {
	sum := sha256.Sum256(rawSPKI)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// CertFingerprint is KeyFingerprint of a certificate's key.
func CertFingerprint(c *x509.Certificate) string { return KeyFingerprint(c.RawSubjectPublicKeyInfo) }

// GroupsForRole maps a role people are given to the groups their
// certificate carries.
func GroupsForRole(role string) ([]string, error) {
	switch role {
	case RoleAdmin:
		return []string{GroupAdmins}, nil
	case RoleViewer:
		return []string{GroupViewers}, nil
	}
	return nil, fmt.Errorf("unknown role %q: use %q or %q", role, RoleAdmin, RoleViewer)
}

// NodeName returns the device name of a node identity, or "".
func NodeName(u *apiserver.UserInfo) string {
	if u == nil || !slices.Contains(u.Groups, GroupNodes) {
		return ""
	}
	name, ok := strings.CutPrefix(u.Name, NodePrefix)
	if !ok || name == "" {
		return ""
	}
	return name
}

// Authorizer is the hub's authorizer: the three roles, with nodes decided
// by the Node rules.
type Authorizer struct {
	Nodes *NodeAuthorizer
}

var _ apiserver.Authorizer = (*Authorizer)(nil)

// Authorize implements apiserver.Authorizer.
func (z *Authorizer) Authorize(ctx context.Context, a apiserver.Attributes) (bool, string, error) {
	u := a.User
	if u == nil {
		return false, "unauthenticated requests may only use the public paths", nil
	}
	if a.Resource == "" && a.Verb == "post" && apiserver.IsSelfReviewPath(a.Path) {
		return true, "anyone authenticated may ask what it may do and who it is", nil
	}
	if slices.Contains(u.Groups, GroupAdmins) {
		return true, "admin (group " + GroupAdmins + ")", nil
	}
	var reasons []string
	if node := NodeName(u); node != "" {
		ok, reason := z.Nodes.Authorize(ctx, node, a)
		if ok {
			return true, reason, nil
		}
		reasons = append(reasons, reason)
	} else if slices.Contains(u.Groups, GroupNodes) {
		reasons = append(reasons, fmt.Sprintf("the group %s is for device identities named %s<name>, not %q", GroupNodes, NodePrefix, u.Name))
	}
	if slices.Contains(u.Groups, GroupViewers) {
		ok, reason := authorizeViewer(a)
		if ok {
			return true, reason, nil
		}
		reasons = append(reasons, reason)
	}
	if len(reasons) == 0 {
		return false, fmt.Sprintf("no role: admins are in the group %s, viewers in %s, devices in %s; this user's groups are %q",
			GroupAdmins, GroupViewers, GroupNodes, u.Groups), nil
	}
	return false, strings.Join(reasons, "; "), nil
}

func authorizeViewer(a apiserver.Attributes) (bool, string) {
	if a.Resource == "" {
		if strings.HasPrefix(a.Path, "/debug/") {
			// Profiles show the hub's goroutines with their arguments.
			return false, "viewer rule: the hub's profiles (/debug/) are for admins"
		}
		if a.Verb == "get" || a.Verb == "head" {
			return true, "viewer: read"
		}
		return false, "viewer rule: viewers may only read"
	}
	switch a.Verb {
	case "get", "list", "watch":
	default:
		return false, "viewer rule: viewers may only read (get, list, watch)"
	}
	if a.APIGroup == "" && a.Resource == "secrets" {
		return false, "viewer rule: viewers may read everything except Secrets"
	}
	switch a.Subresource {
	case "", "status", "log", "scale":
	default:
		return false, fmt.Sprintf("viewer rule: viewers may not use the %s subresource", a.Subresource)
	}
	return true, "viewer: read"
}

var _ apiserver.WatchRechecker = (*Authorizer)(nil)

// RecheckWatch: what a device may read of Secrets and ConfigMaps follows
// its pods (a Secret while a pod bound to it uses it), so its watches of
// them are decided again before each event. Other rights do not change
// with the objects; a device's watch of its own pods must still see their
// deletion.
func (z *Authorizer) RecheckWatch(a apiserver.Attributes) bool {
	return NodeName(a.User) != "" && a.APIGroup == "" && (a.Resource == "secrets" || a.Resource == "configmaps")
}
