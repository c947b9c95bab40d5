package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
)

// File names inside the PKI directory.
const (
	CACertFile      = "ca.crt"
	CAKeyFile       = "ca.key"
	ServingCertFile = "serving.crt"
	ServingKeyFile  = "serving.key"
	AdminCertFile   = "admin.crt"
	AdminKeyFile    = "admin.key"
)

const (
	pemCertificate = "CERTIFICATE"
	pemPrivateKey  = "PRIVATE KEY"
	pemCSR         = "CERTIFICATE REQUEST"
)

// newKey makes the key type used for everything the hub generates itself:
// ECDSA P-256 is small, fast to sign with on weak edge CPUs and understood by
// every TLS stack the clients use.
func newKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generate ECDSA P-256 key: %w", err)
	}
	return k, nil
}

func encodeKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("pki: encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: der}), nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: der})
}

func newSerial() (*big.Int, error) {
	// 128 random bits, as CA/Browser guidance asks for at least 64.
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("pki: generate serial number: %w", err)
	}
	return s, nil
}

// pair is a certificate with its key, in parsed and in PEM form.
type pair struct {
	tls     tls.Certificate // Leaf is set
	certPEM []byte
	keyPEM  []byte
}

func (p *pair) leaf() *x509.Certificate { return p.tls.Leaf }

func (p *pair) signer() crypto.Signer { return p.tls.PrivateKey.(crypto.Signer) }

func parsePair(certPEM, keyPEM []byte) (*pair, error) {
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, err
		}
	}
	if _, ok := c.PrivateKey.(crypto.Signer); !ok {
		return nil, fmt.Errorf("private key of type %T cannot sign", c.PrivateKey)
	}
	return &pair{tls: c, certPEM: certPEM, keyPEM: keyPEM}, nil
}

// readPair loads dir/certFile and dir/keyFile. It returns fs.ErrNotExist
// (wrapped) when either file is missing.
func readPair(dir, certFile, keyFile string) (*pair, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, certFile))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, keyFile))
	if err != nil {
		return nil, err
	}
	p, err := parsePair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: %s and %s in %s: %w", certFile, keyFile, dir, err)
	}
	return p, nil
}

// writePair writes the key first and the certificate last, so the
// certificate's presence marks a complete pair.
func writePair(dir, certFile, keyFile string, p *pair) error {
	if err := writeFileAtomic(filepath.Join(dir, keyFile), p.keyPEM, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, certFile), p.certPEM, 0o644)
}

// writeFileAtomic replaces path with data so that a crash at any moment
// leaves either the old or the new content, never a torn file.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	// Set the mode before any secret byte lands in the file.
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("pki: sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("pki: sync directory %s: %w", dir, err)
	}
	return nil
}

func fileExists(path string) (bool, error) {
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("pki: %w", err)
	}
}
