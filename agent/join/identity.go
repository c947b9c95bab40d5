package join

import (
	"context"
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
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/internal/atomicfile"
)

// File names inside DATA_DIR/pki.
const (
	PKIDir   = "pki"
	CAFile   = "ca.crt"
	NodeFile = "node.pem"
	// NextKeyFile holds the key a renewal in progress asks a certificate
	// for.
	NextKeyFile = "node-next.key"
	renewShare  = 0.7
)

// ErrNoIdentity means the data dir holds no identity yet: the device must
// join with a token.
var ErrNoIdentity = errors.New("this device has not joined a hub yet")

// Identity is a joined device's certificate, key and pinned CA. It is
// safe for concurrent use; Run replaces the certificate in place.
type Identity struct {
	dir   string
	node  string
	hub   string
	caPEM []byte
	pool  *x509.CertPool
	now   func() time.Time
	log   *slog.Logger

	mu   sync.RWMutex
	cert *tls.Certificate
	pem  []byte

	sessions *SessionCache
}

// Load reads the identity kept in dataDir. It returns ErrNoIdentity
// (wrapped) when there is none.
func Load(dataDir string) (*Identity, error) {
	dir := filepath.Join(dataDir, PKIDir)
	caPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w (no %s)", ErrNoIdentity, filepath.Join(dir, CAFile))
	}
	if err != nil {
		return nil, fmt.Errorf("reading the pinned hub CA: %w", err)
	}
	nodePEM, err := os.ReadFile(filepath.Join(dir, NodeFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w (no %s)", ErrNoIdentity, filepath.Join(dir, NodeFile))
	}
	if err != nil {
		return nil, fmt.Errorf("reading the device certificate: %w", err)
	}
	id, err := newIdentity(dir, caPEM, nodePEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, NodeFile), err)
	}
	return id, nil
}

func newIdentity(dir string, caPEM, nodePEM []byte) (*Identity, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the pinned hub CA is not a PEM certificate")
	}
	cert, err := parseNodePEM(nodePEM)
	if err != nil {
		return nil, err
	}
	id := &Identity{dir: dir, caPEM: caPEM, pool: pool, now: time.Now, log: slog.Default(), cert: cert, pem: nodePEM, sessions: &SessionCache{}}
	id.node, err = nodeNameOf(cert.Leaf)
	if err != nil {
		return nil, err
	}
	return id, nil
}

func parseNodePEM(b []byte) (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(b, b)
	if err != nil {
		return nil, fmt.Errorf("not a certificate followed by its key: %w", err)
	}
	return &c, nil
}

func nodeNameOf(c *x509.Certificate) (string, error) {
	node, ok := agentapi.NodeNameOf(c.Subject.CommonName)
	if !ok {
		return "", fmt.Errorf("certificate is for %q, not a device (%sNAME)", c.Subject.CommonName, agentapi.NodeUserPrefix)
	}
	return node, nil
}

// NodeName is the device's name in the fleet.
func (id *Identity) NodeName() string { return id.node }

// Certificate returns the current client certificate.
func (id *Identity) Certificate() *tls.Certificate {
	id.mu.RLock()
	defer id.mu.RUnlock()
	return id.cert
}

// NotAfter is when the current certificate expires.
func (id *Identity) NotAfter() time.Time { return id.Certificate().Leaf.NotAfter }

// CAPEM is the pinned hub CA.
func (id *Identity) CAPEM() []byte { return id.caPEM }

// CertFile is the file holding the certificate and key (for tools that
// take file names, such as a kubeconfig); it follows renewals.
func (id *Identity) CertFile() string { return filepath.Join(id.dir, NodeFile) }

// CAFile is the pinned CA's file.
func (id *Identity) CAFile() string { return filepath.Join(id.dir, CAFile) }

// TLSConfig trusts only the pinned CA and presents the current
// certificate, renewed ones included, on every new connection. Its
// connections resume the device's TLS sessions with the hub (Sessions).
func (id *Identity) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    id.pool.Clone(),
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return id.Certificate(), nil
		},
		ClientSessionCache: id.sessions,
	}
}

// Sessions is the device's cache of TLS sessions with its hubs, shared by
// every connection made with TLSConfig (and given to client-go's
// transport with WithSessionCache). A resumed session presents the
// certificate it began with, so a renewal empties it: connections made
// after a renewal present the new certificate.
func (id *Identity) Sessions() *SessionCache { return id.sessions }

// RESTConfig is a client-go config for the hub at hubURL as this device.
// Connections made after a renewal use the new certificate.
func (id *Identity) RESTConfig(hubURL string) *rest.Config {
	return &rest.Config{Host: hubURL, Transport: hubTransport(id.TLSConfig()), UserAgent: "flotilla-agent/" + id.node}
}

// RequestHeaderTableSize bounds the HPACK table (RFC 7541) in which a
// device encodes the headers of its requests to the hub, and so the table
// the hub keeps for each device to decode them. Filled, HTTP/2's default
// of 4 KiB costs the hub about 6 KB of heap per device (60 MB at 10,000),
// and an agent's varied requests (pod status, Events, ConfigMaps) fill
// it; 512 bytes hold the headers of a Lease renewal, the request a device
// sends most, so it still goes out as a few indexes.
const RequestHeaderTableSize = 512

// hubTransport is a device's HTTP transport to its hub. The device's
// first request on a connection says the table is this small, so the hub
// never holds more of it.
func hubTransport(tlsCfg *tls.Config) *http.Transport {
	t := utilnet.SetTransportDefaults(&http.Transport{TLSClientConfig: tlsCfg})
	WithSmallHeaderTable(t)
	return t
}

// WithSmallHeaderTable gives the transport client-go makes for a device's
// rest.Config (rest.Config.Wrap) the header table of hubTransport. It
// sets it on the net/http transport itself (under client-go's own
// wrappers), before its first connection: a copy would not do, since the
// HTTP/2 transport client-go attached to it reads its settings from the
// original.
func WithSmallHeaderTable(rt http.RoundTripper) http.RoundTripper {
	if t := NetHTTPTransport(rt); t != nil && t.HTTP2 == nil {
		t.HTTP2 = &http.HTTP2Config{MaxEncoderHeaderTableSize: RequestHeaderTableSize}
	}
	return rt
}

// NetHTTPTransport finds the net/http transport under client-go's
// wrappers, or nil.
func NetHTTPTransport(rt http.RoundTripper) *http.Transport {
	for inner := rt; inner != nil; {
		switch t := inner.(type) {
		case *http.Transport:
			return t
		case utilnet.RoundTripperWrapper:
			inner = t.WrappedRoundTripper()
		default:
			return nil
		}
	}
	return nil
}

// SessionCache is a tls.ClientSessionCache that can be emptied. After a
// hub restart every device reconnects at once; resuming a session skips
// the signatures and certificate checks of a full handshake on both
// sides, and the hub keeps its ticket keys across restarts so that the
// sessions stay good.
type SessionCache struct {
	mu    sync.Mutex
	inner tls.ClientSessionCache
}

// sessionsKept is per device: one hub, or a few sharing an etcd.
const sessionsKept = 8

// Get returns the session kept for sessionKey.
func (c *SessionCache) Get(sessionKey string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		return nil, false
	}
	return c.inner.Get(sessionKey)
}

// Put keeps (or, nil, forgets) the session for sessionKey.
func (c *SessionCache) Put(sessionKey string, cs *tls.ClientSessionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		c.inner = tls.NewLRUClientSessionCache(sessionsKept)
	}
	c.inner.Put(sessionKey, cs)
}

// Reset forgets every session.
func (c *SessionCache) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inner = nil
}

// WithSessionCache gives the transport client-go makes for a device's
// rest.Config (rest.Config.Wrap) the device's session cache, on the
// net/http transport itself, as WithSmallHeaderTable does.
func WithSessionCache(c *SessionCache) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		if t := NetHTTPTransport(rt); t != nil && t.TLSClientConfig != nil {
			t.TLSClientConfig.ClientSessionCache = c
		}
		return rt
	}
}

func (id *Identity) renewAt() time.Time {
	c := id.Certificate().Leaf
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotBefore.Add(time.Duration(float64(life) * renewShare))
}

// Run renews the certificate at 70% of its lifetime, talking to the first
// of hubURLs that answers with the current certificate, until ctx ends. A
// failed renewal is retried with backoff; the current certificate stays
// in use meanwhile.
func (id *Identity) Run(ctx context.Context, hubURLs ...string) error {
	if len(hubURLs) == 0 {
		return errors.New("join: no hub URL to renew the certificate with")
	}
	backoff := 10 * time.Second
	for {
		wait := id.renewAt().Sub(id.now())
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			continue // re-read the clock: a timer can fire early relative to a test clock
		}
		var err error
		for _, u := range hubURLs {
			if err = id.Renew(ctx, u); err == nil || ctx.Err() != nil {
				break
			}
		}
		if err == nil {
			backoff = 10 * time.Second
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		id.log.Warn("renewing the device certificate failed; retrying", "node", id.node, "notAfter", id.NotAfter(), "retryIn", backoff, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, 10*time.Minute)
	}
}

// Renew asks the hub for a new certificate for a new key, authenticating
// with the current one, and stores it. The old key is then forgotten.
// The new key is written to NextKeyFile before it is sent and kept until
// the certificate is stored: a renewal whose answer is lost is retried
// with the same key, which the hub then recognizes.
func (id *Identity) Renew(ctx context.Context, hubURL string) error {
	c := &client{hub: hubURL, http: &http.Client{Transport: &http.Transport{TLSClientConfig: id.TLSConfig()}, Timeout: requestTimeout}}
	defer c.close()
	key, err := id.nextKey()
	if err != nil {
		return err
	}
	csrPEM, keyPEM, err := csrFor(id.node, key)
	if err != nil {
		return err
	}
	resp, err := c.post(ctx, agentapi.PathRenew, agentapi.RenewRequest{CSR: string(csrPEM)})
	if err != nil {
		return fmt.Errorf("renewing the certificate of %s: %w", id.node, err)
	}
	certPEM := []byte(resp.Certificate)
	nodePEM := append(append([]byte{}, certPEM...), keyPEM...)
	cert, err := parseNodePEM(nodePEM)
	if err != nil {
		return fmt.Errorf("the hub's renewed certificate: %w", err)
	}
	if name, err := nodeNameOf(cert.Leaf); err != nil || name != id.node {
		return fmt.Errorf("the hub renewed the certificate for %q, not %q", cert.Leaf.Subject.CommonName, id.node)
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: id.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: cert.Leaf.NotBefore.Add(time.Second)}); err != nil {
		return fmt.Errorf("the hub's renewed certificate does not chain to the pinned CA: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(id.dir, NodeFile), nodePEM, 0o600); err != nil {
		return err
	}
	id.mu.Lock()
	id.cert, id.pem = cert, nodePEM
	// Under mu: whoever sees the new certificate finds no old session.
	id.sessions.Reset()
	id.mu.Unlock()
	if err := os.Remove(filepath.Join(id.dir, NextKeyFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		id.log.Warn("removing the renewal key, now in use", "err", err)
	}
	id.log.Info("renewed the device certificate", "node", id.node, "notAfter", cert.Leaf.NotAfter)
	return nil
}

// nextKey returns the key of the renewal in progress, or makes and keeps
// a new one.
func (id *Identity) nextKey() (crypto.Signer, error) {
	path := filepath.Join(id.dir, NextKeyFile)
	b, err := os.ReadFile(path)
	if err == nil {
		key, perr := parseKey(b)
		if perr == nil {
			return key, nil
		}
		id.log.Warn("the renewal key is damaged; making a new one", "file", path, "err", perr)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading the renewal key: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("making the device key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding the device key: %w", err)
	}
	if err := atomicfile.Write(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, fmt.Errorf("keeping the renewal key: %w", err)
	}
	return key, nil
}

func parseKey(b []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T cannot sign", k)
	}
	return signer, nil
}
