package agentapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// CAHashPrefix starts every CA hash.
const CAHashPrefix = "sha256:"

// ErrCAHashMismatch means the CA a hub presented is not the one pinned with
// --ca-hash: the device must not talk to that hub.
var ErrCAHashMismatch = errors.New("CA does not match the pinned hash")

// HashCA returns "sha256:<hex>" of c's DER-encoded SubjectPublicKeyInfo,
// the same value as kubeadm's --discovery-token-ca-cert-hash. Hashing the
// public key rather than the certificate keeps the pin valid if the CA
// certificate is ever re-issued for the same key.
func HashCA(c *x509.Certificate) string {
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return CAHashPrefix + hex.EncodeToString(sum[:])
}

// CheckCAHash parses the CA certificate in caPEM and returns it only if
// HashCA of it equals want (compared in constant time). want must be
// "sha256:" and 64 hex digits.
func CheckCAHash(caPEM []byte, want string) (*x509.Certificate, error) {
	hexPart, ok := strings.CutPrefix(strings.ToLower(strings.TrimSpace(want)), CAHashPrefix)
	if !ok {
		return nil, fmt.Errorf("pki: CA hash %q must start with %q", want, CAHashPrefix)
	}
	if b, err := hex.DecodeString(hexPart); err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("pki: CA hash %q must be %q followed by %d hex digits", want, CAHashPrefix, 2*sha256.Size)
	}
	block, _ := pem.Decode(caPEM)
	if block == nil || block.Type != pemCertificate {
		return nil, errors.New("pki: the hub sent no PEM CA certificate")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: parse the hub's CA certificate: %w", err)
	}
	got := HashCA(c)
	if subtle.ConstantTimeCompare([]byte(got), []byte(CAHashPrefix+hexPart)) != 1 {
		return nil, fmt.Errorf("pki: %w: the hub's CA hashes to %s, pinned %s; check --ca-hash, or this is not your hub", ErrCAHashMismatch, got, want)
	}
	if !c.IsCA {
		return nil, errors.New("pki: the certificate the hub sent as its CA is not a CA certificate")
	}
	return c, nil
}
