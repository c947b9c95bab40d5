package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"flotilla.dev/flotilla/api/agentapi"
)

// AnnotationServingCertHash is agentapi.AnnotationServingCertHash, where
// the Node publishes CertHash of the serving certificate for the hub to
// pin.
const AnnotationServingCertHash = agentapi.AnnotationServingCertHash

// Serving certificate lifetime, and how long before its end a new one is
// made when the agent starts.
const (
	servingValidity = 365 * 24 * time.Hour
	servingRenewal  = 30 * 24 * time.Hour
)

// LoadOrCreateServingCert returns the agent's self-signed serving
// certificate from dir (serving.crt, serving.key), creating it when it is
// missing, unreadable or due for renewal.
//
// Self-signed because the hub does not verify it by a CA: it pins the
// certificate's hash, which the agent publishes in its Node's
// AnnotationServingCertHash, so no CA has to be trusted for it and no
// address has to be right in it. When devices get serving certificates
// from the hub's CA (through the join's CSR), the hub can verify those
// instead and this file goes away.
func LoadOrCreateServingCert(dir string, hosts []string) (tls.Certificate, error) {
	crtPath, keyPath := filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
	if c, err := tls.LoadX509KeyPair(crtPath, keyPath); err == nil && c.Leaf != nil && time.Until(c.Leaf.NotAfter) > servingRenewal {
		return c, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return tls.Certificate{}, fmt.Errorf("creating %s: %w", dir, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "flotilla-agent"},
		NotBefore:    now.Add(-time.Hour), // device clocks drift
		NotAfter:     now.Add(servingValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("creating the serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, err
	}
	// Key first: a crash between the two leaves a key without its
	// certificate, which the next start replaces.
	if err := writeAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return tls.Certificate{}, err
	}
	if err := writeAtomic(crtPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return tls.Certificate{}, err
	}
	c, err := tls.LoadX509KeyPair(crtPath, keyPath)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("reading back the serving certificate: %w", err)
	}
	return c, nil
}

// CertHash is the pin of c's leaf (agentapi.ServingCertHash).
func CertHash(c tls.Certificate) (string, error) {
	if len(c.Certificate) == 0 {
		return "", errors.New("no certificate")
	}
	return agentapi.ServingCertHash(c.Certificate[0]), nil
}

func writeAtomic(path string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
