package pki

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"flotilla.dev/flotilla/api/agentapi"
)

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func testOptions(clock *fakeClock) Options {
	o := Options{Hostname: "hub-test", Logger: quietLogger()}
	if clock != nil {
		o.Now = clock.Now
	}
	return o
}

func mustLoad(t *testing.T, dir string, o Options) *PKI {
	t.Helper()
	p, err := LoadOrCreate(dir, o)
	if err != nil {
		t.Fatalf("LoadOrCreate(%s): %v", dir, err)
	}
	return p
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parseCertPEM(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("no CERTIFICATE PEM block in %q", b)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCreateThenReloadIsStable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	p := mustLoad(t, dir, testOptions(nil))

	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("mode of %s = %v, want 0700", dir, st.Mode().Perm())
	}
	for _, f := range []string{CAKeyFile, ServingKeyFile, AdminKeyFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("mode of %s = %v, want 0600", f, st.Mode().Perm())
		}
	}

	ca := p.CACert()
	if ca.Subject.CommonName != CACommonName || !ca.IsCA {
		t.Errorf("CA subject %q IsCA=%v, want %q and a CA", ca.Subject.CommonName, ca.IsCA, CACommonName)
	}
	pub, ok := ca.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("CA key is %T, want ECDSA P-256", ca.PublicKey)
	}
	if life := ca.NotAfter.Sub(ca.NotBefore); life < DefaultCAValidity || life > DefaultCAValidity+time.Hour {
		t.Errorf("CA lifetime %s, want about 10 years", life)
	}
	if life := p.ServingCert().NotAfter.Sub(p.ServingCert().NotBefore); life < DefaultServingValidity || life > DefaultServingValidity+time.Hour {
		t.Errorf("serving lifetime %s, want about 1 year", life)
	}
	adminPEM, _ := p.AdminCredentials()
	admin := parseCertPEM(t, adminPEM)
	if user, groups := IdentityFromCert(admin); user != AdminUser || !slices.Equal(groups, []string{MastersGroup}) {
		t.Errorf("admin identity %q %q, want %q [%q]", user, groups, AdminUser, MastersGroup)
	}
	if err := p.VerifyClient(admin, nil); err != nil {
		t.Errorf("admin certificate does not verify: %v", err)
	}

	before := map[string][]byte{}
	for _, f := range []string{CACertFile, CAKeyFile, ServingCertFile, ServingKeyFile, AdminCertFile, AdminKeyFile} {
		before[f] = readFile(t, filepath.Join(dir, f))
	}
	p2 := mustLoad(t, dir, testOptions(nil))
	for f, b := range before {
		if !bytes.Equal(b, readFile(t, filepath.Join(dir, f))) {
			t.Errorf("%s changed on reload", f)
		}
	}
	if p2.CAHash() != p.CAHash() {
		t.Errorf("CA hash changed on reload: %s → %s", p.CAHash(), p2.CAHash())
	}
	if !p2.ServingCert().Equal(p.ServingCert()) {
		t.Error("serving certificate reissued on a reload that needed none")
	}
	if !bytes.Equal(p2.CACertPEM(), before[CACertFile]) {
		t.Error("CACertPEM differs from ca.crt")
	}
}

func TestLoosePermissionsAreTightened(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mustLoad(t, dir, testOptions(nil))
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("mode of existing %s = %v, want 0700", dir, st.Mode().Perm())
	}
}

func TestServingSANs(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(nil)
	o.SANs = []string{"hub.example.com", "10.0.0.5", "2001:db8::1", "*.fleet.example.com", "HUB.example.com"}
	p := mustLoad(t, dir, o)
	c := p.ServingCert()

	// flotilla-hub: the name every hub of a fleet answers to.
	wantDNS := []string{"*.fleet.example.com", "flotilla-hub", "hub-test", "hub.example.com", "localhost"}
	gotDNS := slices.Clone(c.DNSNames)
	slices.Sort(gotDNS)
	if !slices.Equal(gotDNS, wantDNS) {
		t.Errorf("DNS SANs %q, want %q", gotDNS, wantDNS)
	}
	var gotIPs []string
	for _, ip := range c.IPAddresses {
		gotIPs = append(gotIPs, ip.String())
	}
	slices.Sort(gotIPs)
	wantIPs := []string{"10.0.0.5", "127.0.0.1", "2001:db8::1", "::1"}
	if !slices.Equal(gotIPs, wantIPs) {
		t.Errorf("IP SANs %q, want %q", gotIPs, wantIPs)
	}
	roots := p.CAPool()
	for _, host := range []string{"localhost", "127.0.0.1", "::1", "hub-test", "hub.example.com", "10.0.0.5", "2001:db8::1", "a.fleet.example.com"} {
		if _, err := c.Verify(x509.VerifyOptions{DNSName: host, Roots: roots}); err != nil {
			t.Errorf("serving certificate not valid for %s: %v", host, err)
		}
	}
	if !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		t.Errorf("serving certificate lacks server-auth usage: %v", c.ExtKeyUsage)
	}

	// Changing the SANs reissues the serving certificate under the same CA.
	caBefore := readFile(t, filepath.Join(dir, CACertFile))
	o.SANs = []string{"hub.example.com", "192.168.7.7"}
	p2 := mustLoad(t, dir, o)
	c2 := p2.ServingCert()
	if c2.SerialNumber.Cmp(c.SerialNumber) == 0 {
		t.Fatal("serving certificate not reissued after the SANs changed")
	}
	if err := c2.VerifyHostname("192.168.7.7"); err != nil {
		t.Errorf("new serving certificate lacks the new SAN: %v", err)
	}
	if err := c2.VerifyHostname("10.0.0.5"); err == nil {
		t.Error("new serving certificate still carries a removed SAN")
	}
	if !bytes.Equal(caBefore, readFile(t, filepath.Join(dir, CACertFile))) {
		t.Error("CA changed when only the SANs did")
	}
	onDisk := parseCertPEM(t, readFile(t, filepath.Join(dir, ServingCertFile)))
	if !onDisk.Equal(c2) {
		t.Error("serving.crt on disk is not the certificate in use")
	}
}

func TestInvalidSANsAreRefused(t *testing.T) {
	for _, san := range []string{"", "bad_name!", "hub..example", "fe80::1%eth0", "-leading.example.com"} {
		o := testOptions(nil)
		o.SANs = []string{san}
		if _, err := LoadOrCreate(t.TempDir(), o); err == nil {
			t.Errorf("SAN %q accepted", san)
		}
	}
}

func TestServingRenewalNearExpiry(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	o := testOptions(clock)
	o.ServingValidity = 100 * time.Hour
	p := mustLoad(t, dir, o)
	first := p.ServingCert()

	clock.Advance(60 * time.Hour) // 40% of the lifetime left: keep
	if renewed, err := p.renewServingIfNeeded(); err != nil || renewed {
		t.Fatalf("renewed=%v err=%v with 40%% left, want no renewal", renewed, err)
	}
	if p2 := mustLoad(t, dir, o); !p2.ServingCert().Equal(first) {
		t.Fatal("reload reissued a serving certificate with 40% of its lifetime left")
	}

	clock.Advance(15 * time.Hour) // about 25% left: renew
	renewed, err := p.renewServingIfNeeded()
	if err != nil || !renewed {
		t.Fatalf("renewed=%v err=%v with 25%% left, want a renewal", renewed, err)
	}
	second := p.ServingCert()
	if !second.NotAfter.After(first.NotAfter) {
		t.Errorf("renewed certificate ends %s, not after the old %s", second.NotAfter, first.NotAfter)
	}
	got, err := p.ServerTLSConfig().GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Leaf.Equal(second) {
		t.Error("GetCertificate does not hand out the renewed certificate")
	}
	if !parseCertPEM(t, readFile(t, filepath.Join(dir, ServingCertFile))).Equal(second) {
		t.Error("renewed certificate not written to serving.crt")
	}
}

func TestRunRotatesServingCertificate(t *testing.T) {
	clock := newFakeClock()
	o := testOptions(clock)
	o.ServingValidity = 10 * time.Hour
	o.CheckInterval = 5 * time.Millisecond
	p := mustLoad(t, t.TempDir(), o)
	first := p.ServingCert()
	tlsConf := p.ServerTLSConfig()

	done := make(chan error, 1)
	runCtx, stop := context.WithCancel(t.Context())
	defer stop()
	go func() { done <- p.Run(runCtx) }()

	clock.Advance(9 * time.Hour)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := tlsConf.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Leaf.Equal(first) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Run did not rotate a serving certificate with 10% of its lifetime left")
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v after its context ended, want nil", err)
	}
}

func TestCAHashMatchesIndependentComputation(t *testing.T) {
	dir := t.TempDir()
	p := mustLoad(t, dir, testOptions(nil))

	der, err := x509.MarshalPKIXPublicKey(p.CACert().PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	want := "sha256:" + hex.EncodeToString(sum[:])
	if got := p.CAHash(); got != want {
		t.Errorf("CAHash() = %s, want %s", got, want)
	}

	// kubeadm's documented recipe for the discovery hash.
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Log("openssl not installed; skipping the openssl cross-check")
		return
	}
	cmd := exec.Command("sh", "-c", `openssl x509 -pubkey -noout -in "$1" | openssl pkey -pubin -outform der | openssl dgst -sha256 -hex | sed 's/^.* //'`,
		"sh", filepath.Join(dir, CACertFile))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("openssl: %v", err)
	}
	if got, want := p.CAHash(), "sha256:"+strings.TrimSpace(string(out)); got != want {
		t.Errorf("CAHash() = %s, openssl says %s", got, want)
	}
}

func TestCAHashPinsTheCA(t *testing.T) {
	p := mustLoad(t, t.TempDir(), testOptions(nil))
	other := mustLoad(t, t.TempDir(), testOptions(nil))

	c, err := agentapi.CheckCAHash(p.CACertPEM(), p.CAHash())
	if err != nil {
		t.Fatalf("own CA refused: %v", err)
	}
	if !c.Equal(p.CACert()) {
		t.Error("CheckCAHash returned another certificate")
	}
	if _, err := agentapi.CheckCAHash(p.CACertPEM(), strings.ToUpper(p.CAHash())); err != nil {
		t.Errorf("upper-case hash refused: %v", err)
	}
	if _, err := agentapi.CheckCAHash(other.CACertPEM(), p.CAHash()); !errors.Is(err, agentapi.ErrCAHashMismatch) {
		t.Errorf("foreign CA: err = %v, want ErrCAHashMismatch", err)
	}
	for _, bad := range []string{"", "sha256:", "sha256:xyz", "md5:" + strings.Repeat("0", 64), strings.TrimPrefix(p.CAHash(), "sha256:")} {
		if _, err := agentapi.CheckCAHash(p.CACertPEM(), bad); err == nil {
			t.Errorf("malformed hash %q accepted", bad)
		}
	}
	if _, err := agentapi.CheckCAHash([]byte("not pem"), p.CAHash()); err == nil {
		t.Error("garbage CA accepted")
	}
}

func TestDamagedFiles(t *testing.T) {
	t.Run("serving pair mismatch is reissued", func(t *testing.T) {
		dir := t.TempDir()
		p := mustLoad(t, dir, testOptions(nil))
		old := p.ServingCert()
		// A crash between the two renames of a renewal leaves a new key next
		// to the old certificate.
		_, keyPEM, err := p.IssueClientCert("x", nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ServingKeyFile), keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		p2 := mustLoad(t, dir, testOptions(nil))
		if p2.ServingCert().Equal(old) {
			t.Error("mismatched serving pair kept")
		}
		if _, err := readPair(dir, ServingCertFile, ServingKeyFile); err != nil {
			t.Errorf("serving pair on disk still broken: %v", err)
		}
	})
	t.Run("missing CA key is an error, never a new CA", func(t *testing.T) {
		dir := t.TempDir()
		p := mustLoad(t, dir, testOptions(nil))
		if err := os.Remove(filepath.Join(dir, CAKeyFile)); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadOrCreate(dir, testOptions(nil)); err == nil {
			t.Fatal("LoadOrCreate succeeded without ca.key")
		}
		if !bytes.Equal(readFile(t, filepath.Join(dir, CACertFile)), p.CACertPEM()) {
			t.Error("ca.crt was replaced")
		}
	})
	t.Run("corrupt CA is an error", func(t *testing.T) {
		dir := t.TempDir()
		mustLoad(t, dir, testOptions(nil))
		if err := os.WriteFile(filepath.Join(dir, CACertFile), []byte("garbage"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadOrCreate(dir, testOptions(nil)); err == nil {
			t.Fatal("LoadOrCreate accepted a corrupt ca.crt")
		}
	})
	t.Run("expired CA is an error", func(t *testing.T) {
		clock := newFakeClock()
		dir := t.TempDir()
		o := testOptions(clock)
		o.CAValidity = 48 * time.Hour
		mustLoad(t, dir, o)
		clock.Advance(49 * time.Hour)
		_, err := LoadOrCreate(dir, o)
		if err == nil || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("err = %v, want an error saying the CA expired", err)
		}
	})
	t.Run("admin certificate of another CA is reissued", func(t *testing.T) {
		dir := t.TempDir()
		p := mustLoad(t, dir, testOptions(nil))
		other := mustLoad(t, t.TempDir(), testOptions(nil))
		certPEM, keyPEM := other.AdminCredentials()
		if err := writePair(dir, AdminCertFile, AdminKeyFile, &pair{certPEM: certPEM, keyPEM: keyPEM}); err != nil {
			t.Fatal(err)
		}
		p2 := mustLoad(t, dir, testOptions(nil))
		got, _ := p2.AdminCredentials()
		if err := p.VerifyClient(parseCertPEM(t, got), nil); err != nil {
			t.Errorf("admin certificate after reload: %v", err)
		}
	})
}

func TestCertificatesNeverOutliveTheCA(t *testing.T) {
	o := testOptions(nil)
	o.CAValidity = 30 * 24 * time.Hour
	p := mustLoad(t, t.TempDir(), o)
	if p.ServingCert().NotAfter.After(p.CACert().NotAfter) {
		t.Errorf("serving certificate ends %s after the CA %s", p.ServingCert().NotAfter, p.CACert().NotAfter)
	}
	certPEM, _, err := p.IssueClientCert("u", nil, 365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if c := parseCertPEM(t, certPEM); c.NotAfter.After(p.CACert().NotAfter) {
		t.Errorf("client certificate ends %s after the CA %s", c.NotAfter, p.CACert().NotAfter)
	}
}

func TestNoDirectory(t *testing.T) {
	if _, err := LoadOrCreate("", Options{}); err == nil {
		t.Error("empty directory accepted")
	}
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(filepath.Join(f, "pki"), testOptions(nil)); err == nil {
		t.Error("directory under a regular file accepted")
	}
}

func TestMachineHostnameIsAdded(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		t.Skipf("no hostname: %v", err)
	}
	host = strings.ToLower(host)
	p := mustLoad(t, t.TempDir(), Options{Logger: quietLogger()})
	if !slices.Contains(p.ServingCert().DNSNames, host) {
		t.Errorf("serving certificate names %q lack the hostname %q", p.ServingCert().DNSNames, host)
	}
}
