package pki

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"flotilla.dev/flotilla/api/agentapi"
)

// Identities and names the hub's own certificates carry.
const (
	CACommonName      = "flotilla-ca"
	ServingCommonName = "flotilla-hub"
	AdminUser         = "flotilla:admin"
	MastersGroup      = "system:masters"
)

// Defaults for Options.
const (
	DefaultCAValidity      = 10 * 365 * 24 * time.Hour
	DefaultServingValidity = 365 * 24 * time.Hour
	DefaultAdminValidity   = 365 * 24 * time.Hour
	DefaultCheckInterval   = 10 * time.Minute
)

// backdate moves NotBefore into the past so that a device whose clock runs
// a little behind the hub's still accepts a certificate issued just now.
const backdate = 5 * time.Minute

// renewFraction is the share of a certificate's lifetime left at which the
// hub replaces it: 30% left means renewal at 70% of the lifetime, the same
// point at which agents renew theirs.
const renewFraction = 0.3

// Options configure LoadOrCreate. The zero value is usable.
type Options struct {
	// SANs are extra DNS names and IP addresses for the serving certificate
	// (the hub's --tls-san). localhost, 127.0.0.1, ::1 and the machine's
	// hostname are always added.
	SANs []string
	// Hostname overrides os.Hostname() for the serving certificate.
	Hostname string

	CAValidity      time.Duration // default DefaultCAValidity; only used when the CA is created
	ServingValidity time.Duration // default DefaultServingValidity
	AdminValidity   time.Duration // default DefaultAdminValidity
	// CheckInterval is how often Run looks at the serving certificate's
	// expiry. Default DefaultCheckInterval.
	CheckInterval time.Duration

	// Now is the clock; default time.Now. Tests move it forward to exercise
	// renewal.
	Now    func() time.Time
	Logger *slog.Logger
}

// PKI is the hub's CA and the certificates it keeps in its directory. It is
// safe for concurrent use; Run rotates the serving certificate in place.
type PKI struct {
	dir  string
	opts Options
	log  *slog.Logger

	ca     *pair
	caPool *x509.CertPool
	caHash string

	// desired serving certificate names, sorted
	dnsNames []string
	ips      []netip.Addr

	renewMu sync.Mutex // serialises serving renewals
	serving atomic.Pointer[pair]
	admin   *pair

	verified verifiedCache

	ticketMu sync.Mutex // serialises ticket key rotations
	tickets  atomic.Pointer[[]ticketKey]
	// full and resumed count the handshakes of ServerTLSConfig's
	// connections.
	full, resumed atomic.Uint64
}

// LoadOrCreate opens the PKI kept in dir, creating what is missing: the CA
// at the first start (never again once ca.crt exists), then the serving and
// admin certificates whenever they are missing, unreadable, not signed by
// the CA, within 30% of their end, or (serving) not carrying exactly the
// names asked for.
func LoadOrCreate(dir string, opts Options) (*PKI, error) {
	if dir == "" {
		return nil, errors.New("pki: no directory given for the hub's certificates")
	}
	opts = withDefaults(opts)
	p := &PKI{dir: dir, opts: opts, log: opts.Logger.With("component", "pki", "dir", dir)}
	var err error
	if p.dnsNames, p.ips, err = servingNames(opts); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: create %s: %w", dir, err)
	}
	// The directory holds private keys: tighten it even if it existed.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: set mode of %s: %w", dir, err)
	}
	if err := p.loadOrCreateCA(); err != nil {
		return nil, err
	}
	if _, err := p.renewServingIfNeeded(); err != nil {
		return nil, err
	}
	if err := p.loadOrCreateAdmin(); err != nil {
		return nil, err
	}
	if err := p.rotateTicketKeys(); err != nil {
		return nil, err
	}
	return p, nil
}

func withDefaults(o Options) Options {
	if o.CAValidity <= 0 {
		o.CAValidity = DefaultCAValidity
	}
	if o.ServingValidity <= 0 {
		o.ServingValidity = DefaultServingValidity
	}
	if o.AdminValidity <= 0 {
		o.AdminValidity = DefaultAdminValidity
	}
	if o.CheckInterval <= 0 {
		o.CheckInterval = DefaultCheckInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.SANs = slices.Clone(o.SANs)
	return o
}

// servingNames validates opts.SANs and returns the full, sorted and
// de-duplicated set of names the serving certificate must carry.
func servingNames(o Options) ([]string, []netip.Addr, error) {
	dns := []string{"localhost", agentapi.HubServerName}
	ips := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
	for _, s := range o.SANs {
		s = strings.TrimSpace(s)
		if s == "" {
			return nil, nil, errors.New("pki: empty entry in the serving certificate's SANs (--tls-san); remove it")
		}
		if a, err := netip.ParseAddr(s); err == nil {
			if a.Zone() != "" {
				return nil, nil, fmt.Errorf("pki: SAN %q: an IP address with a zone cannot be put in a certificate; give it without %%zone", s)
			}
			ips = append(ips, a.Unmap())
			continue
		}
		name := strings.ToLower(s)
		var errs []string
		if strings.HasPrefix(name, "*.") {
			errs = validation.IsWildcardDNS1123Subdomain(name)
		} else {
			errs = validation.IsDNS1123Subdomain(name)
		}
		if len(errs) > 0 {
			return nil, nil, fmt.Errorf("pki: SAN %q is neither an IP address nor a DNS name: %s", s, strings.Join(errs, "; "))
		}
		dns = append(dns, name)
	}
	host := o.Hostname
	if host == "" {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	host = strings.ToLower(strings.TrimSpace(host))
	if host != "" {
		// A hostname that is not a DNS name (underscores, say) cannot go in a
		// certificate; it is no reason to refuse to start.
		if errs := validation.IsDNS1123Subdomain(host); len(errs) == 0 {
			dns = append(dns, host)
		} else {
			o.Logger.Warn("hostname is not a DNS name, leaving it out of the serving certificate", "hostname", host, "reason", strings.Join(errs, "; "))
		}
	}
	slices.Sort(dns)
	dns = slices.Compact(dns)
	slices.SortFunc(ips, func(a, b netip.Addr) int { return a.Compare(b) })
	ips = slices.Compact(ips)
	return dns, ips, nil
}

func (p *PKI) now() time.Time { return p.opts.Now() }

func (p *PKI) loadOrCreateCA() error {
	certPath := filepath.Join(p.dir, CACertFile)
	exists, err := fileExists(certPath)
	if err != nil {
		return err
	}
	var ca *pair
	if exists {
		ca, err = readPair(p.dir, CACertFile, CAKeyFile)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("pki: %s exists but its key %s is missing: restore the key from a backup (a new CA would lock out every joined device): %w",
				certPath, filepath.Join(p.dir, CAKeyFile), err)
		}
		if err != nil {
			return err
		}
		if err := p.checkCA(ca.leaf()); err != nil {
			return err
		}
	} else {
		if ca, err = p.newCA(); err != nil {
			return err
		}
		if err := writePair(p.dir, CACertFile, CAKeyFile, ca); err != nil {
			return err
		}
		p.log.Info("created the hub CA", "notAfter", ca.leaf().NotAfter, "caHash", agentapi.HashCA(ca.leaf()))
	}
	p.ca = ca
	p.caPool = x509.NewCertPool()
	p.caPool.AddCert(ca.leaf())
	p.caHash = agentapi.HashCA(ca.leaf())
	return nil
}

func (p *PKI) checkCA(c *x509.Certificate) error {
	path := filepath.Join(p.dir, CACertFile)
	if !c.IsCA || !c.BasicConstraintsValid || c.KeyUsage&x509.KeyUsageCertSign == 0 {
		return fmt.Errorf("pki: %s is not a CA certificate (no CA basic constraint or cert-sign usage)", path)
	}
	now := p.now()
	if now.After(c.NotAfter) {
		return fmt.Errorf("pki: the hub CA in %s expired on %s; move %s aside to create a new one (every device must then join again)",
			path, c.NotAfter.Format(time.RFC3339), p.dir)
	}
	if now.Before(c.NotBefore) {
		return fmt.Errorf("pki: the hub CA in %s is valid only from %s; check this machine's clock", path, c.NotBefore.Format(time.RFC3339))
	}
	if needsRenewal(c, now) {
		p.log.Warn("the hub CA is in the last 30% of its lifetime; plan a CA rotation", "notAfter", c.NotAfter)
	}
	return nil
}

func (p *PKI) newCA() (*pair, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := p.now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: CACommonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(p.opts.CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// The hub signs leaves only; no intermediate CA may be made with it.
		MaxPathLen:     0,
		MaxPathLenZero: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: create CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	ca, err := parsePair(encodeCert(der), keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: new CA: %w", err)
	}
	return ca, nil
}

// sign issues a leaf certificate for pub, valid from now for ttl but never
// beyond the CA's own end (a certificate outliving its issuer would fail
// verification anyway, only later and more confusingly).
func (p *PKI) sign(tmpl *x509.Certificate, pub crypto.PublicKey, ttl time.Duration) ([]byte, error) {
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := p.now()
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-backdate)
	tmpl.NotAfter = now.Add(ttl)
	if caEnd := p.ca.leaf().NotAfter; tmpl.NotAfter.After(caEnd) {
		tmpl.NotAfter = caEnd
	}
	tmpl.BasicConstraintsValid = true
	tmpl.IsCA = false
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca.leaf(), pub, p.ca.signer())
	if err != nil {
		return nil, fmt.Errorf("pki: sign certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	return der, nil
}

// needsRenewal reports whether less than 30% of c's lifetime is left.
func needsRenewal(c *x509.Certificate, now time.Time) bool {
	total := c.NotAfter.Sub(c.NotBefore)
	left := c.NotAfter.Sub(now)
	return float64(left) < renewFraction*float64(total)
}

// servingProblem says why the serving certificate must be replaced, or ""
// when it is fine.
func (p *PKI) servingProblem(c *x509.Certificate, now time.Time) string {
	if err := c.CheckSignatureFrom(p.ca.leaf()); err != nil {
		return "not signed by the hub CA"
	}
	if needsRenewal(c, now) {
		return "less than 30% of its lifetime left"
	}
	if now.Before(c.NotBefore) {
		return "not yet valid"
	}
	dns := slices.Clone(c.DNSNames)
	slices.Sort(dns)
	var ips []netip.Addr
	for _, ip := range c.IPAddresses {
		if a, ok := netip.AddrFromSlice(ip); ok {
			ips = append(ips, a.Unmap())
		}
	}
	slices.SortFunc(ips, func(a, b netip.Addr) int { return a.Compare(b) })
	if !slices.Equal(dns, p.dnsNames) || !slices.Equal(ips, p.ips) {
		return "names (SANs) changed"
	}
	return ""
}

// renewServingIfNeeded loads the serving certificate (when none is held
// yet) and replaces it when servingProblem finds fault with it.
func (p *PKI) renewServingIfNeeded() (bool, error) {
	p.renewMu.Lock()
	defer p.renewMu.Unlock()
	cur := p.serving.Load()
	if cur == nil {
		loaded, err := readPair(p.dir, ServingCertFile, ServingKeyFile)
		switch {
		case err == nil:
			cur = loaded
		case errors.Is(err, fs.ErrNotExist):
		default:
			// The serving pair is derived from the CA alone, so a damaged
			// one is replaced rather than refused.
			p.log.Warn("serving certificate unreadable, issuing a new one", "err", err)
		}
	}
	reason := "missing"
	if cur != nil {
		if reason = p.servingProblem(cur.leaf(), p.now()); reason == "" {
			p.serving.Store(cur)
			return false, nil
		}
	}
	next, err := p.newServing()
	if err != nil {
		return false, err
	}
	if err := writePair(p.dir, ServingCertFile, ServingKeyFile, next); err != nil {
		return false, err
	}
	p.serving.Store(next)
	p.log.Info("issued serving certificate", "reason", reason, "notAfter", next.leaf().NotAfter,
		"dnsNames", next.leaf().DNSNames, "ips", next.leaf().IPAddresses)
	return true, nil
}

func (p *PKI) newServing() (*pair, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	ips := make([]net.IP, 0, len(p.ips))
	for _, a := range p.ips {
		ips = append(ips, net.IP(a.AsSlice()))
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: ServingCommonName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    slices.Clone(p.dnsNames),
		IPAddresses: ips,
	}
	der, err := p.sign(tmpl, key.Public(), p.opts.ServingValidity)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return parsePair(encodeCert(der), keyPEM)
}

func (p *PKI) loadOrCreateAdmin() error {
	cur, err := readPair(p.dir, AdminCertFile, AdminKeyFile)
	reason := "missing"
	switch {
	case err == nil:
		reason = p.adminProblem(cur.leaf())
		if reason == "" {
			p.admin = cur
			return nil
		}
	case errors.Is(err, fs.ErrNotExist):
	default:
		reason = "unreadable"
		p.log.Warn("admin certificate unreadable, issuing a new one", "err", err)
	}
	certPEM, keyPEM, err := p.IssueClientCert(AdminUser, []string{MastersGroup}, p.opts.AdminValidity)
	if err != nil {
		return err
	}
	next, err := parsePair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("pki: new admin certificate: %w", err)
	}
	if err := writePair(p.dir, AdminCertFile, AdminKeyFile, next); err != nil {
		return err
	}
	p.admin = next
	p.log.Info("issued admin client certificate", "reason", reason, "notAfter", next.leaf().NotAfter)
	return nil
}

func (p *PKI) adminProblem(c *x509.Certificate) string {
	if err := p.VerifyClient(c, nil); err != nil {
		return err.Error()
	}
	if user, groups := IdentityFromCert(c); user != AdminUser || !slices.Contains(groups, MastersGroup) {
		return "not the admin identity"
	}
	if needsRenewal(c, p.now()) {
		return "less than 30% of its lifetime left"
	}
	return ""
}

// Run replaces the serving certificate when it nears its end, and the
// session ticket key when it is a day old, checking every
// Options.CheckInterval, until ctx ends. Connections already open keep the
// certificate they were made with; new handshakes get the new one through
// ServerTLSConfig's GetCertificate. A failed renewal is logged and retried
// at the next check: the current certificate is still valid for a while.
func (p *PKI) Run(ctx context.Context) error {
	t := time.NewTicker(p.opts.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if _, err := p.renewServingIfNeeded(); err != nil {
				p.log.Error("renewing the serving certificate failed; will retry", "err", err,
					"notAfter", p.serving.Load().leaf().NotAfter)
			}
			if err := p.rotateTicketKeys(); err != nil {
				p.log.Error("rotating the session ticket keys failed; will retry", "err", err)
			}
		}
	}
}

// Dir is the directory the PKI lives in.
func (p *PKI) Dir() string { return p.dir }

// CACert returns the hub CA certificate. The caller must not modify it.
func (p *PKI) CACert() *x509.Certificate { return p.ca.leaf() }

// CACertPEM returns the hub CA certificate in PEM form, as served to
// joining devices and written into kubeconfigs.
func (p *PKI) CACertPEM() []byte { return slices.Clone(p.ca.certPEM) }

// CAPool returns a fresh pool holding only the hub CA, for clients of the
// hub (and of agents, whose serving certificates the hub signs).
func (p *PKI) CAPool() *x509.CertPool { return p.caPool.Clone() }

// CAHash returns "sha256:<hex>" of the CA certificate's
// SubjectPublicKeyInfo, the value devices pin with --ca-hash.
func (p *PKI) CAHash() string { return p.caHash }

// ServingCert returns the serving certificate currently handed out.
func (p *PKI) ServingCert() *x509.Certificate { return p.serving.Load().leaf() }

// AdminCredentials returns the admin client certificate and key in PEM form.
func (p *PKI) AdminCredentials() (certPEM, keyPEM []byte) {
	return slices.Clone(p.admin.certPEM), slices.Clone(p.admin.keyPEM)
}

// WriteAdminKubeconfig writes a kubeconfig for the admin identity that
// talks to serverURL. The hub calls it at every start, so the file follows
// a renewed admin certificate.
func (p *PKI) WriteAdminKubeconfig(path, serverURL string) error {
	return WriteKubeconfig(path, serverURL, p.ca.certPEM, p.admin.certPEM, p.admin.keyPEM, AdminUser)
}
