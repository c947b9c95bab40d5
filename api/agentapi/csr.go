package agentapi

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// PEM block types.
const (
	pemCertificate = "CERTIFICATE"
	pemPrivateKey  = "PRIVATE KEY"
	pemCSR         = "CERTIFICATE REQUEST"
)

// NewCSR makes a new ECDSA P-256 key and a CSR for commonName and groups
// signed with it. Devices call it for NodeUser(name) in NodesGroup; the
// key stays with whoever made it. keyPEM is PKCS #8.
func NewCSR(commonName string, groups []string) (csrPEM, keyPEM []byte, err error) {
	if strings.TrimSpace(commonName) == "" {
		return nil, nil, errors.New("pki: a CSR needs a common name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: generate ECDSA P-256 key: %w", err)
	}
	return CSRFor(key, commonName, groups)
}

// CSRFor makes a CSR for an existing key (a device that joins again keeps
// the key the hub recorded), and returns the key too, PEM (PKCS #8).
func CSRFor(key crypto.Signer, commonName string, groups []string) (csrPEM, keyPEM []byte, err error) {
	if strings.TrimSpace(commonName) == "" {
		return nil, nil, errors.New("pki: a CSR needs a common name")
	}
	groups = slices.Clone(groups)
	slices.Sort(groups)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: commonName, Organization: slices.Compact(groups)},
	}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: create CSR for %q: %w", commonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemCSR, Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: keyDER}), nil
}
