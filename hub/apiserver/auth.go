package apiserver

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"flotilla.dev/flotilla/api/agentapi"
)

// UserInfo is who made a request.
type UserInfo struct {
	Name   string
	Groups []string
}

// Well-known identities.
const (
	// GroupAdmins may do everything (Kubernetes' system:masters).
	GroupAdmins = "system:masters"
	// GroupNodes holds every device's identity, system:node:<name>.
	GroupNodes = agentapi.NodesGroup
	// NodeUserPrefix starts the user name of a device.
	NodeUserPrefix = agentapi.NodeUserPrefix
)

// Authenticator says who made a request. It returns (nil, nil) for a
// request that carries no credentials, and an error for credentials that
// are present but not valid; both become 401 on protected paths. An
// error wrapping ErrCannotAuthenticateYet is 503 instead.
type Authenticator interface {
	Authenticate(r *http.Request) (*UserInfo, error)
}

// ErrCannotAuthenticateYet: the authenticator cannot decide yet (a hub
// that has not loaded what it checks credentials against). The client is
// told to come back in a few seconds rather than that its credentials are
// bad: after a hub restart a whole fleet asks at once, and a 401 would
// make every device's request fail instead of wait.
var ErrCannotAuthenticateYet = errors.New("the hub cannot check credentials yet")

// Attributes describe what a request wants to do, for authorization and
// audit.
type Attributes struct {
	User        *UserInfo
	Verb        string
	APIGroup    string
	Resource    string
	Subresource string
	Namespace   string
	Name        string
	// Path is set for non-resource requests (discovery, metrics ...).
	Path string
}

// Authorizer decides whether a request may proceed; reason says which rule
// decided, and is shown to the client on a refusal.
type Authorizer interface {
	Authorize(ctx context.Context, a Attributes) (allowed bool, reason string, err error)
}

// CertAuthenticator authenticates by TLS client certificate: the user is
// the certificate's common name, the groups its organizations. Verify
// checks the chain and validity (the TLS layer only requests a
// certificate, so that a bad one is answered with a 401 Status rather than
// a failed handshake).
type CertAuthenticator struct {
	Verify func(cert *x509.Certificate, intermediates []*x509.Certificate) error
}

var errNoCredentials = errors.New("no client certificate")

// Authenticate implements Authenticator.
func (a CertAuthenticator) Authenticate(r *http.Request) (*UserInfo, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil, nil
	}
	leaf := r.TLS.PeerCertificates[0]
	if err := a.Verify(leaf, r.TLS.PeerCertificates[1:]); err != nil {
		return nil, fmt.Errorf("client certificate %q: %w", leaf.Subject.CommonName, err)
	}
	if leaf.Subject.CommonName == "" {
		return nil, errors.New("client certificate has no common name")
	}
	return &UserInfo{Name: leaf.Subject.CommonName, Groups: slices.Clone(leaf.Subject.Organization)}, nil
}
