package agentapi

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// The wire is fixed: hubs and devices of different versions talk over it.
func TestWire(t *testing.T) {
	for got, want := range map[string]string{
		PathCA: "/join/v1/ca", PathCSR: "/join/v1/csr", PathRenew: "/join/v1/renew", PathPrefix: "/join/v1/",
		AnnotationServingCertHash: "node.flotilla.dev/serving-cert-sha256",
		NodeUserPrefix:            "system:node:", NodesGroup: "system:nodes", CAHashPrefix: "sha256:",
	} {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
	if AgentPort != 10250 {
		t.Errorf("AgentPort = %d", AgentPort)
	}
	for _, c := range []struct {
		v    any
		want string
	}{
		{JoinRequest{Token: "t", NodeName: "n", CSR: "c"}, `{"token":"t","nodeName":"n","csr":"c"}`},
		{RenewRequest{CSR: "c"}, `{"csr":"c"}`},
		{CertificateResponse{Certificate: "a", CA: "b"}, `{"certificate":"a","ca":"b"}`},
		{CertificateResponse{Certificate: "a", CA: "b", Labels: map[string]string{"k": "v"}}, `{"certificate":"a","ca":"b","labels":{"k":"v"}}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("%T = %s (%v), want %s", c.v, b, err, c.want)
		}
	}
}

func TestNodeIdentity(t *testing.T) {
	if NodeUser("kiosk-1") != "system:node:kiosk-1" {
		t.Error(NodeUser("kiosk-1"))
	}
	if n, ok := NodeNameOf("system:node:kiosk-1"); !ok || n != "kiosk-1" {
		t.Errorf("NodeNameOf = %q %v", n, ok)
	}
	for _, u := range []string{"system:node:", "alice", "system:nodes", ""} {
		if n, ok := NodeNameOf(u); ok {
			t.Errorf("NodeNameOf(%q) = %q, a device", u, n)
		}
	}
}

func selfSigned(t *testing.T, isCA bool) ([]byte, *x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: isCA, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: nil, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), c, key
}

func TestCheckCAHash(t *testing.T) {
	caPEM, ca, _ := selfSigned(t, true)
	otherPEM, _, _ := selfSigned(t, true)
	leafPEM, leaf, _ := selfSigned(t, false)
	hash := HashCA(ca)
	if !strings.HasPrefix(hash, "sha256:") || len(hash) != len("sha256:")+64 {
		t.Fatalf("HashCA = %s", hash)
	}
	c, err := CheckCAHash(caPEM, hash)
	if err != nil || !c.Equal(ca) {
		t.Fatalf("own CA: %v", err)
	}
	if _, err := CheckCAHash(caPEM, " "+strings.ToUpper(hash)+"\n"); err != nil {
		t.Errorf("upper-case hash refused: %v", err)
	}
	if _, err := CheckCAHash(otherPEM, hash); !errors.Is(err, ErrCAHashMismatch) {
		t.Errorf("foreign CA: %v, want ErrCAHashMismatch", err)
	}
	if _, err := CheckCAHash(leafPEM, HashCA(leaf)); err == nil || errors.Is(err, ErrCAHashMismatch) {
		t.Errorf("a certificate that is no CA: %v", err)
	}
	for _, bad := range []string{"", "sha256:", "sha256:xyz", "md5:" + strings.Repeat("0", 64), strings.TrimPrefix(hash, "sha256:")} {
		if _, err := CheckCAHash(caPEM, bad); err == nil {
			t.Errorf("malformed hash %q accepted", bad)
		}
	}
	if _, err := CheckCAHash([]byte("not pem"), hash); err == nil {
		t.Error("garbage CA accepted")
	}
}

func TestCSR(t *testing.T) {
	csrPEM, keyPEM, err := NewCSR(NodeUser("kiosk-1"), []string{NodesGroup, "b", NodesGroup})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(csrPEM)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		t.Fatalf("CSR PEM: %q", csrPEM)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil || csr.CheckSignature() != nil {
		t.Fatalf("CSR: %v", err)
	}
	if csr.Subject.CommonName != "system:node:kiosk-1" || !slices.Equal(csr.Subject.Organization, []string{"b", "system:nodes"}) {
		t.Errorf("subject %v", csr.Subject)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" {
		t.Fatalf("key PEM: %q", keyPEM)
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !key.(*ecdsa.PrivateKey).PublicKey.Equal(csr.PublicKey) {
		t.Error("the key is not the CSR's")
	}
	// Again for the same key.
	csr2PEM, key2PEM, err := CSRFor(key.(*ecdsa.PrivateKey), NodeUser("kiosk-1"), []string{NodesGroup})
	if err != nil || string(key2PEM) != string(keyPEM) {
		t.Fatalf("CSRFor: %v, same key %v", err, string(key2PEM) == string(keyPEM))
	}
	b2, _ := pem.Decode(csr2PEM)
	if csr2, err := x509.ParseCertificateRequest(b2.Bytes); err != nil || !key.(*ecdsa.PrivateKey).PublicKey.Equal(csr2.PublicKey) {
		t.Errorf("CSRFor made a CSR for another key (%v)", err)
	}
	if _, _, err := NewCSR(" ", nil); err == nil {
		t.Error("empty common name accepted")
	}
}

func TestPinnedTLSConfig(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer srv.Close()
	pin := ServingCertHash(srv.Certificate().Raw)
	get := func(pin string) error {
		tr := &http.Transport{TLSClientConfig: PinnedTLSConfig(pin, nil)}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(pin); err != nil {
		t.Errorf("pinned certificate refused: %v", err)
	}
	for _, bad := range []string{"", "sha256:00", ServingCertHash([]byte("another"))} {
		if err := get(bad); err == nil || !strings.Contains(err.Error(), "publishes "+bad) {
			t.Errorf("pin %q: %v", bad, err)
		}
	}
}

func TestParseLabels(t *testing.T) {
	got, err := ParseLabels(" site=berlin, node.flotilla.dev/tier=edge ,,empty=")
	if err != nil || len(got) != 3 || got["site"] != "berlin" || got["node.flotilla.dev/tier"] != "edge" || got["empty"] != "" {
		t.Errorf("ParseLabels = %v, %v", got, err)
	}
	for _, bad := range []string{"noequals", "a=1,a=2", "bad key=1", "k=bad value", "-a=1"} {
		if _, err := ParseLabels(bad); err == nil {
			t.Errorf("ParseLabels(%q) accepted", bad)
		}
	}
	if m, err := ParseLabels(""); err != nil || len(m) != 0 {
		t.Errorf("empty: %v %v", m, err)
	}
}

func TestUsageReportValidate(t *testing.T) {
	ok := UsageReport{Time: time.Unix(1, 0), WindowMS: 1000, IntervalS: 60, Pods: []PodUsage{{Namespace: "a", Name: "b", Containers: []ContainerUsage{{Name: "c"}}}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid report refused: %v", err)
	}
	bad := UsageReport{Pods: []PodUsage{{Name: "b", Containers: []ContainerUsage{{}}}}}
	err := bad.Validate()
	for _, want := range []string{"t (the window's end) is missing", "w (the window", "i (the report interval", "p[0]: a pod needs ns and n", "p[0].c[0]: a container needs n"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to say %q", err, want)
		}
	}
}
