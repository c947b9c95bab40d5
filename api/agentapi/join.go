package agentapi

import "strings"

// Paths the hub serves for joining and renewing.
const (
	// PathPrefix is the prefix of every join path.
	PathPrefix = "/join/v1/"
	// PathCA answers GET with the hub CA, PEM, to anyone: a device
	// checks it against its pinned hash (CheckCAHash) before it sends
	// anything.
	PathCA = PathPrefix + "ca"
	// PathCSR takes a JoinRequest, with no client certificate, and
	// answers a CertificateResponse.
	PathCSR = PathPrefix + "csr"
	// PathRenew takes a RenewRequest from a joined device, authenticated
	// with its current certificate, and answers a CertificateResponse.
	PathRenew = PathPrefix + "renew"
)

// JoinRequest is POSTed to PathCSR.
type JoinRequest struct {
	Token    string `json:"token"`
	NodeName string `json:"nodeName"`
	// CSR is a PEM certificate request for CN system:node:<nodeName>,
	// O system:nodes, made on the device with its own key.
	CSR string `json:"csr"`
}

// RenewRequest is POSTed to PathRenew with the device's current
// certificate.
type RenewRequest struct {
	CSR string `json:"csr"`
}

// CertificateResponse answers every signing request.
type CertificateResponse struct {
	// Certificate is the signed client certificate, PEM.
	Certificate string `json:"certificate"`
	// CA is the hub CA, PEM.
	CA string `json:"ca"`
	// Labels the Node got from the join token.
	Labels map[string]string `json:"labels,omitempty"`
}

// A device's identity, as its client certificate carries it (CommonName
// the user, Organization the groups).
const (
	// NodeUserPrefix starts the user name of a device: system:node:NAME.
	NodeUserPrefix = "system:node:"
	// NodesGroup holds every device.
	NodesGroup = "system:nodes"
)

// NodeUser is the user name of device node.
func NodeUser(node string) string { return NodeUserPrefix + node }

// NodeNameOf returns the device name in user (system:node:NAME) and
// whether user is a device's at all.
func NodeNameOf(user string) (string, bool) {
	node, ok := strings.CutPrefix(user, NodeUserPrefix)
	return node, ok && node != ""
}
