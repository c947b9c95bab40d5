package agentapi

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
)

// AgentPort is the port of the agent's HTTPS server (the kubelet's): the
// agent listens on it unless told otherwise and publishes the port it
// uses in its Node's status.daemonEndpoints.kubeletEndpoint; the hub uses
// AgentPort for a Node that publishes none.
const AgentPort = 10250

// HubServerName is in every hub's serving certificate: an agent given
// several hub URLs checks whichever hub it reaches against this name, so
// that one fleet's hubs, whose certificates share the CA but not their
// addresses, are interchangeable to it.
const HubServerName = "flotilla-hub"

// AnnotationServingCertHash on a Node carries the pin of its agent's
// serving certificate (ServingCertHash). The agent's certificate is
// self-signed; the hub accepts it by this pin alone (PinnedTLSConfig).
const AnnotationServingCertHash = "node.flotilla.dev/serving-cert-sha256"

// ServingCertHash is the pin of a certificate: "sha256:" and the hex
// SHA-256 of its DER bytes.
func ServingCertHash(der []byte) string {
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// PinnedTLSConfig is the TLS configuration for talking to an agent's
// server: TLS 1.3, presenting client (none when nil), and accepting the
// agent's certificate only when its ServingCertHash is pin (the value of
// its Node's AnnotationServingCertHash). There is no chain to verify: the
// certificate is self-signed, and the pin is what makes it trusted.
func PinnedTLSConfig(pin string, client *tls.Certificate) *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Checked against the pin in VerifyConnection instead of a chain.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the agent presented no certificate")
			}
			if got := ServingCertHash(cs.PeerCertificates[0].Raw); got != pin {
				return fmt.Errorf("the agent's certificate is %s, but its Node publishes %s", got, pin)
			}
			return nil
		},
	}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	return cfg
}
