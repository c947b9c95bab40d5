package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Errors of VerifyClient and Authenticate. Any of them means the request is
// unauthenticated: the apiserver answers 401 and says which one it was.
var (
	ErrNoClientCert  = errors.New("no client certificate")
	ErrUntrustedCert = errors.New("client certificate not signed by the hub CA")
	ErrExpiredCert   = errors.New("client certificate expired or not yet valid")
)

// ErrInvalidCSR is wrapped by SignCSR and IssueClientCert errors caused by
// the request (bad CSR, mismatched subject, bad name or lifetime): a 400 for
// the caller, not a hub fault.
var ErrInvalidCSR = errors.New("invalid certificate request")

// minRSABits is the smallest RSA key SignCSR certifies.
const minRSABits = 2048

// IdentityFromCert reads the identity a client certificate carries the way
// Kubernetes does: the subject's CommonName is the user, its Organizations
// are the groups.
func IdentityFromCert(c *x509.Certificate) (user string, groups []string) {
	return c.Subject.CommonName, slices.Clone(c.Subject.Organization)
}

// IssueClientCert makes a new key and a client certificate for it. It is for
// identities whose key the hub may see (kubeconfigs for people, the admin);
// devices use SignCSR so that their key never leaves them.
func (p *PKI) IssueClientCert(commonName string, groups []string, ttl time.Duration) (certPEM, keyPEM []byte, err error) {
	if err := checkIdentity(commonName, groups, ttl); err != nil {
		return nil, nil, err
	}
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	certPEM, err = p.signClient(key.Public(), commonName, groups, ttl)
	if err != nil {
		return nil, nil, err
	}
	if keyPEM, err = encodeKey(key); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// SignCSR signs a client certificate for the public key in csrPEM after
// checking the CSR's self-signature (proof that the requester holds the key)
// and that its subject asks for exactly commonName and groups. The caller
// decides which identity a request may have (from a join token, say); the
// CSR only has to agree with it. CSRs asking for SANs are refused: a client
// identity lives in the subject alone.
func (p *PKI) SignCSR(csrPEM []byte, commonName string, groups []string, ttl time.Duration) (certPEM []byte, err error) {
	if err := checkIdentity(commonName, groups, ttl); err != nil {
		return nil, err
	}
	block, _ := pem.Decode(csrPEM)
	if block == nil {
		return nil, fmt.Errorf("%w: no PEM block found; send a PEM %q", ErrInvalidCSR, pemCSR)
	}
	if block.Type != pemCSR && block.Type != "NEW "+pemCSR {
		return nil, fmt.Errorf("%w: PEM block is %q, want %q", ErrInvalidCSR, block.Type, pemCSR)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidCSR, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: signature does not verify (the CSR must be signed with the key it carries): %w", ErrInvalidCSR, err)
	}
	if csr.Subject.CommonName != commonName {
		return nil, fmt.Errorf("%w: CSR asks for common name %q, but this request may only have %q", ErrInvalidCSR, csr.Subject.CommonName, commonName)
	}
	if got, want := normGroups(csr.Subject.Organization), normGroups(groups); !slices.Equal(got, want) {
		return nil, fmt.Errorf("%w: CSR asks for organizations (groups) %q, but this request may only have %q", ErrInvalidCSR, got, want)
	}
	if len(csr.DNSNames)+len(csr.IPAddresses)+len(csr.EmailAddresses)+len(csr.URIs) > 0 {
		return nil, fmt.Errorf("%w: CSR asks for subject alternative names; a client certificate carries its identity in the subject only", ErrInvalidCSR)
	}
	if err := checkPublicKey(csr.PublicKey); err != nil {
		return nil, err
	}
	return p.signClient(csr.PublicKey, commonName, groups, ttl)
}

func (p *PKI) signClient(pub crypto.PublicKey, commonName string, groups []string, ttl time.Duration) ([]byte, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName, Organization: normGroups(groups)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if _, isRSA := pub.(*rsa.PublicKey); isRSA {
		// TLS 1.2 clients with RSA keys may need key encipherment.
		tmpl.KeyUsage |= x509.KeyUsageKeyEncipherment
	}
	der, err := p.sign(tmpl, pub, ttl)
	if err != nil {
		return nil, err
	}
	return encodeCert(der), nil
}

func checkIdentity(commonName string, groups []string, ttl time.Duration) error {
	if strings.TrimSpace(commonName) == "" {
		return fmt.Errorf("%w: empty common name (user)", ErrInvalidCSR)
	}
	for i, g := range groups {
		if strings.TrimSpace(g) == "" {
			return fmt.Errorf("%w: group %d is empty", ErrInvalidCSR, i)
		}
	}
	if ttl <= 0 {
		return fmt.Errorf("%w: certificate lifetime %s is not positive", ErrInvalidCSR, ttl)
	}
	return nil
}

func normGroups(g []string) []string {
	out := slices.Clone(g)
	slices.Sort(out)
	return slices.Compact(out)
}

func checkPublicKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
			return nil
		}
		return fmt.Errorf("%w: ECDSA curve %s is not accepted; use P-256", ErrInvalidCSR, k.Curve.Params().Name)
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return fmt.Errorf("%w: RSA key of %d bits is too small; use at least %d bits or ECDSA P-256", ErrInvalidCSR, k.N.BitLen(), minRSABits)
		}
		return nil
	case ed25519.PublicKey:
		return nil
	default:
		return fmt.Errorf("%w: public key type %T is not accepted; use ECDSA P-256", ErrInvalidCSR, pub)
	}
}

// VerifyClient checks that cert (with the intermediates the client sent
// after it, usually none) chains to the hub CA, is meant for client
// authentication and is valid now. It is the whole of the TLS client check:
// ServerTLSConfig leaves verification to it so that failures become 401s.
// The error wraps ErrNoClientCert, ErrUntrustedCert or ErrExpiredCert.
func (p *PKI) VerifyClient(cert *x509.Certificate, intermediates []*x509.Certificate) error {
	if cert == nil {
		return ErrNoClientCert
	}
	if cert.IsCA {
		// A CA certificate chains to itself when it is a root; it names an
		// issuer, not a client.
		return fmt.Errorf("%w: %q is a CA certificate, not a client certificate", ErrUntrustedCert, cert.Subject.CommonName)
	}
	key := sha256.Sum256(cert.Raw)
	now := p.now()
	if v, ok := p.verified.get(key); ok {
		if now.Before(v.notBefore) || now.After(v.notAfter) {
			return fmt.Errorf("%w: %q is valid from %s to %s", ErrExpiredCert, cert.Subject.CommonName,
				v.notBefore.UTC().Format(time.RFC3339), v.notAfter.UTC().Format(time.RFC3339))
		}
		return nil
	}
	if err := p.verifyChain(cert, intermediates, now); err != nil {
		var invalid x509.CertificateInvalidError
		if errors.As(err, &invalid) && invalid.Reason == x509.Expired {
			return fmt.Errorf("%w: %q is valid from %s to %s: %w", ErrExpiredCert, cert.Subject.CommonName,
				cert.NotBefore.UTC().Format(time.RFC3339), cert.NotAfter.UTC().Format(time.RFC3339), err)
		}
		return fmt.Errorf("%w: %q issued by %q: %w", ErrUntrustedCert, cert.Subject.CommonName, cert.Issuer.CommonName, err)
	}
	if cert.Subject.CommonName == "" {
		return fmt.Errorf("%w: certificate has no common name, so no user", ErrUntrustedCert)
	}
	p.verified.put(key, verifiedCert{notBefore: cert.NotBefore, notAfter: cert.NotAfter})
	return nil
}

// verifyChain checks that cert chains to the hub CA for client
// authentication at the time at.
func (p *PKI) verifyChain(cert *x509.Certificate, intermediates []*x509.Certificate, at time.Time) error {
	opts := x509.VerifyOptions{
		Roots:       p.caPool,
		CurrentTime: at,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(intermediates) > 0 {
		opts.Intermediates = x509.NewCertPool()
		for _, c := range intermediates {
			opts.Intermediates.AddCert(c)
		}
	}
	_, err := cert.Verify(opts)
	return err
}

// IssuedAt is when the hub signed c: its NotBefore without the backdating,
// to the second (certificates carry no finer time). Revocation compares it
// with the moment a user's certificates were revoked.
func IssuedAt(c *x509.Certificate) time.Time { return c.NotBefore.Add(backdate) }

// VerifyExpiredClient checks a client certificate that has expired, for the
// one request that may still use it: a device renewing its certificate
// after being offline past its end. The chain must hold as it did when the
// certificate was valid, and it may have expired no more than maxExpired
// ago. It returns nil for a certificate that is still valid.
func (p *PKI) VerifyExpiredClient(cert *x509.Certificate, intermediates []*x509.Certificate, maxExpired time.Duration) error {
	err := p.VerifyClient(cert, intermediates)
	if !errors.Is(err, ErrExpiredCert) {
		return err
	}
	now := p.now()
	if now.Before(cert.NotBefore) {
		return err
	}
	if now.Sub(cert.NotAfter) > maxExpired {
		return fmt.Errorf("%w: %q expired at %s, more than %s ago", ErrExpiredCert, cert.Subject.CommonName,
			cert.NotAfter.UTC().Format(time.RFC3339), maxExpired)
	}
	if err := p.verifyChain(cert, intermediates, cert.NotAfter.Add(-time.Second)); err != nil {
		return fmt.Errorf("%w: %q issued by %q: %w", ErrUntrustedCert, cert.Subject.CommonName, cert.Issuer.CommonName, err)
	}
	return nil
}

// verifiedCache remembers client certificates whose chain to the hub CA
// has been verified, so that a request costs a hash and a time comparison
// instead of a signature check (about 150µs on this class of CPU, and every
// agent heartbeat is a request). Caching is sound because the CA cannot
// change while the hub runs, revocation is checked apart from it on every
// request (hub/auth.Revocations), and the CA's path length of zero means a
// chain is always leaf → CA, whatever intermediates a client sends; only
// the validity window stays time dependent and is checked on every hit.
type verifiedCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]verifiedCert
}

type verifiedCert struct{ notBefore, notAfter time.Time }

// maxVerified bounds the cache: more than the devices a hub serves, and
// when it fills up it starts afresh rather than growing.
const maxVerified = 32768

func (c *verifiedCache) get(k [sha256.Size]byte) (verifiedCert, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *verifiedCache) put(k [sha256.Size]byte, v verifiedCert) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxVerified {
		c.m = make(map[[sha256.Size]byte]verifiedCert)
	}
	c.m[k] = v
}

// Authenticate verifies the client certificate of a TLS connection (nil
// state, or none sent, is ErrNoClientCert) and returns its identity.
func (p *PKI) Authenticate(state *tls.ConnectionState) (user string, groups []string, err error) {
	if state == nil || len(state.PeerCertificates) == 0 {
		return "", nil, ErrNoClientCert
	}
	if err := p.VerifyClient(state.PeerCertificates[0], state.PeerCertificates[1:]); err != nil {
		return "", nil, err
	}
	user, groups = IdentityFromCert(state.PeerCertificates[0])
	return user, groups, nil
}
