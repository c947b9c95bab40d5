package pki

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"slices"
	"testing"
	"time"

	"flotilla.dev/flotilla/api/agentapi"
)

func TestSignCSRAcceptsAGoodCSR(t *testing.T) {
	p := mustLoad(t, t.TempDir(), testOptions(nil))
	csrPEM, keyPEM, err := agentapi.NewCSR("system:node:kiosk-1", []string{agentapi.NodesGroup})
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := p.SignCSR(csrPEM, "system:node:kiosk-1", []string{agentapi.NodesGroup}, 365*24*time.Hour)
	if err != nil {
		t.Fatalf("SignCSR: %v", err)
	}
	c := parseCertPEM(t, certPEM)
	if user, groups := IdentityFromCert(c); user != "system:node:kiosk-1" || !slices.Equal(groups, []string{agentapi.NodesGroup}) {
		t.Errorf("identity %q %q, want system:node:kiosk-1 [system:nodes]", user, groups)
	}
	if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("ExtKeyUsage %v, want client auth only", c.ExtKeyUsage)
	}
	if c.IsCA {
		t.Error("client certificate is a CA")
	}
	// The certificate is for the device's key, which the hub never saw.
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("certificate does not match the CSR's key: %v", err)
	}
	if err := p.VerifyClient(pair.Leaf, nil); err != nil {
		t.Errorf("signed certificate does not verify: %v", err)
	}
	if life := c.NotAfter.Sub(c.NotBefore); life < 365*24*time.Hour || life > 365*24*time.Hour+time.Hour {
		t.Errorf("lifetime %s, want one year", life)
	}

	// Group order is not significant.
	csr2, _, err := agentapi.NewCSR("alice", []string{"b", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.SignCSR(csr2, "alice", []string{"a", "b"}, time.Hour); err != nil {
		t.Errorf("same groups in another order refused: %v", err)
	}
}

func TestSignCSRAcceptsOtherKeyTypes(t *testing.T) {
	p := mustLoad(t, t.TempDir(), testOptions(nil))
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for name, key := range map[string]any{"ed25519": edKey, "p384": p384} {
		csrPEM := makeCSR(t, key, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "n"}})
		if _, err := p.SignCSR(csrPEM, "n", nil, time.Hour); err != nil {
			t.Errorf("%s CSR refused: %v", name, err)
		}
	}
}

func makeCSR(t *testing.T, key any, tmpl *x509.CertificateRequest) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestSignCSRRefusals(t *testing.T) {
	p := mustLoad(t, t.TempDir(), testOptions(nil))
	good, _, err := agentapi.NewCSR("system:node:a", []string{agentapi.NodesGroup})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(good)
	tampered := slices.Clone(block.Bytes)
	tampered[len(tampered)-1] ^= 0xff // last byte of the signature
	badSig := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: tampered})

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	withSANs := makeCSR(t, key, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "system:node:a", Organization: []string{agentapi.NodesGroup}},
		DNSNames: []string{"hub.example.com"},
	})
	p224, err := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	weakCurve := makeCSR(t, p224, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:a", Organization: []string{agentapi.NodesGroup}}})

	cases := []struct {
		name   string
		csr    []byte
		cn     string
		groups []string
		ttl    time.Duration
	}{
		{"other common name", good, "system:node:b", []string{agentapi.NodesGroup}, time.Hour},
		{"extra group asked", good, "system:node:a", nil, time.Hour},
		{"group missing", good, "system:node:a", []string{agentapi.NodesGroup, MastersGroup}, time.Hour},
		{"bad signature", badSig, "system:node:a", []string{agentapi.NodesGroup}, time.Hour},
		{"SANs asked", withSANs, "system:node:a", []string{agentapi.NodesGroup}, time.Hour},
		{"weak curve", weakCurve, "system:node:a", []string{agentapi.NodesGroup}, time.Hour},
		{"not PEM", []byte("hello"), "system:node:a", []string{agentapi.NodesGroup}, time.Hour},
		{"certificate instead of CSR", p.CACertPEM(), "system:node:a", []string{agentapi.NodesGroup}, time.Hour},
		{"garbage DER", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte{1, 2, 3}}), "system:node:a", []string{agentapi.NodesGroup}, time.Hour},
		{"empty common name", good, "", []string{agentapi.NodesGroup}, time.Hour},
		{"zero lifetime", good, "system:node:a", []string{agentapi.NodesGroup}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cert, err := p.SignCSR(tc.csr, tc.cn, tc.groups, tc.ttl)
			if !errors.Is(err, ErrInvalidCSR) {
				t.Fatalf("err = %v, want ErrInvalidCSR", err)
			}
			if cert != nil {
				t.Error("a certificate came back with the error")
			}
		})
	}
}

func TestIssueClientCertAndVerify(t *testing.T) {
	p := mustLoad(t, t.TempDir(), testOptions(nil))
	certPEM, keyPEM, err := p.IssueClientCert("bob", []string{"viewers"}, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.VerifyClient(pair.Leaf, nil); err != nil {
		t.Fatalf("VerifyClient: %v", err)
	}
	user, groups, err := p.Authenticate(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{pair.Leaf}})
	if err != nil || user != "bob" || !slices.Equal(groups, []string{"viewers"}) {
		t.Errorf("Authenticate = %q %q %v, want bob [viewers] nil", user, groups, err)
	}
	if _, _, err := p.IssueClientCert("", nil, time.Hour); !errors.Is(err, ErrInvalidCSR) {
		t.Errorf("empty user: err = %v, want ErrInvalidCSR", err)
	}
	if _, _, err := p.IssueClientCert("x", []string{""}, time.Hour); !errors.Is(err, ErrInvalidCSR) {
		t.Errorf("empty group: err = %v, want ErrInvalidCSR", err)
	}
}

func TestVerifyClientRefusals(t *testing.T) {
	clock := newFakeClock()
	p := mustLoad(t, t.TempDir(), testOptions(clock))
	other := mustLoad(t, t.TempDir(), testOptions(nil))

	foreignPEM, _ := other.AdminCredentials()
	shortPEM, _, err := p.IssueClientCert("shortlived", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	short := parseCertPEM(t, shortPEM)
	if err := p.VerifyClient(short, nil); err != nil {
		t.Fatalf("fresh certificate refused: %v", err)
	}
	// A certificate issued "in the future" relative to the verifier's clock.
	clockAhead := newFakeClock()
	ahead := mustLoad(t, t.TempDir(), testOptions(clockAhead))
	clockAhead.Advance(48 * time.Hour)
	futurePEM, _, err := ahead.IssueClientCert("future", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clockAhead.Advance(-48 * time.Hour)

	clock.Advance(2 * time.Hour)
	cases := []struct {
		name string
		cert *x509.Certificate
		v    *PKI
		want error
	}{
		{"none", nil, p, ErrNoClientCert},
		{"another CA", parseCertPEM(t, foreignPEM), p, ErrUntrustedCert},
		{"expired", short, p, ErrExpiredCert},
		{"not yet valid", parseCertPEM(t, futurePEM), ahead, ErrExpiredCert},
		{"serving certificate (no client-auth usage)", p.ServingCert(), p, ErrUntrustedCert},
		{"the CA itself", p.CACert(), p, ErrUntrustedCert},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.v.VerifyClient(tc.cert, nil); !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if _, _, err := p.Authenticate(nil); !errors.Is(err, ErrNoClientCert) {
		t.Errorf("Authenticate(nil) = %v, want ErrNoClientCert", err)
	}
	if _, _, err := p.Authenticate(&tls.ConnectionState{}); !errors.Is(err, ErrNoClientCert) {
		t.Errorf("Authenticate(no certs) = %v, want ErrNoClientCert", err)
	}
}

func TestIdentityFromCertCopiesGroups(t *testing.T) {
	c := &x509.Certificate{Subject: pkix.Name{CommonName: "u", Organization: []string{"g"}}}
	_, groups := IdentityFromCert(c)
	groups[0] = "changed"
	if c.Subject.Organization[0] != "g" {
		t.Error("IdentityFromCert returned the certificate's own slice")
	}
}

func FuzzSignCSR(f *testing.F) {
	p, err := LoadOrCreate(f.TempDir(), testOptions(nil))
	if err != nil {
		f.Fatal(err)
	}
	good, _, err := agentapi.NewCSR("n", []string{"g"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"))
	f.Add(p.CACertPEM())
	f.Fuzz(func(t *testing.T, in []byte) {
		cert, err := p.SignCSR(in, "n", []string{"g"}, time.Hour)
		if err != nil {
			if !errors.Is(err, ErrInvalidCSR) {
				t.Fatalf("error not wrapping ErrInvalidCSR: %v", err)
			}
			return
		}
		// Anything signed must carry exactly the identity asked for.
		c := parseCertPEM(t, cert)
		if u, g := IdentityFromCert(c); u != "n" || !slices.Equal(g, []string{"g"}) {
			t.Fatalf("signed identity %q %q", u, g)
		}
		if len(c.DNSNames)+len(c.IPAddresses) > 0 || c.IsCA {
			t.Fatal("signed certificate carries SANs or is a CA")
		}
	})
}

func BenchmarkSignCSR(b *testing.B) {
	p, err := LoadOrCreate(b.TempDir(), testOptions(nil))
	if err != nil {
		b.Fatal(err)
	}
	csr, _, err := agentapi.NewCSR("system:node:x", []string{agentapi.NodesGroup})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := p.SignCSR(csr, "system:node:x", []string{agentapi.NodesGroup}, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyClient(b *testing.B) {
	p, err := LoadOrCreate(b.TempDir(), testOptions(nil))
	if err != nil {
		b.Fatal(err)
	}
	certPEM, _ := p.AdminCredentials()
	block, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := p.VerifyClient(c, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func TestVerifyExpiredClient(t *testing.T) {
	clock := newFakeClock()
	p := mustLoad(t, t.TempDir(), testOptions(clock))
	other := mustLoad(t, t.TempDir(), testOptions(clock))
	certPEM, _, err := p.IssueClientCert("system:node:van", []string{"system:nodes"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert := parseCertPEM(t, certPEM)
	foreignPEM, _, err := other.IssueClientCert("system:node:van", []string{"system:nodes"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreign := parseCertPEM(t, foreignPEM)
	if got := IssuedAt(cert); got.Sub(clock.Now()).Abs() > time.Second {
		t.Errorf("IssuedAt = %s, want the signing time %s", got, clock.Now())
	}
	if err := p.VerifyExpiredClient(cert, nil, 24*time.Hour); err != nil {
		t.Errorf("a certificate in date: %v", err)
	}
	clock.Advance(3 * time.Hour)
	if err := p.VerifyClient(cert, nil); !errors.Is(err, ErrExpiredCert) {
		t.Fatalf("VerifyClient of the expired certificate = %v", err)
	}
	if err := p.VerifyExpiredClient(cert, nil, 24*time.Hour); err != nil {
		t.Errorf("expired 2h ago, 24h allowed: %v", err)
	}
	if err := p.VerifyExpiredClient(foreign, nil, 24*time.Hour); !errors.Is(err, ErrUntrustedCert) {
		t.Errorf("an expired certificate of another CA: err = %v, want ErrUntrustedCert", err)
	}
	if err := p.VerifyExpiredClient(cert, nil, time.Hour); !errors.Is(err, ErrExpiredCert) {
		t.Errorf("expired 2h ago, 1h allowed: err = %v, want ErrExpiredCert", err)
	}
}
