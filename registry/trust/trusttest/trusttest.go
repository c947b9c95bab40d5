// Package trusttest signs test images with the real cosign CLI and gives
// tests the tools to take a registry away: a loopback TCP proxy that can be
// closed. The agent's end-to-end tests use it as registry/trust's do.
//
// Tests that need a tool skip with the reason when it is missing, and fail
// when the CI environment variable is set: CI installs the tools with
// scripts/install-deps.sh, so a missing tool there is a broken setup, not a
// reason to pass.
package trusttest

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"flotilla.dev/flotilla/internal/testenv"
)

// CosignVersion is the cosign CLI the tests are written against; the
// signatures' layouts are those it writes.
const CosignVersion = "v2.6.5"

// Require returns the path of a tool, or skips the test with hint (fails
// it under CI): testenv.RequireTool.
func Require(t testing.TB, tool, hint string) string {
	t.Helper()
	return testenv.RequireTool(t, tool, hint)
}

// CLI runs cosign with a private HOME and key password.
type CLI struct {
	bin  string
	home string
	// Dir is where keys are written: NAME.key and NAME.pub.
	Dir string
}

const password = "flotilla-test"

// Cosign finds the cosign CLI (see Require) and gives it a temp HOME.
func Cosign(t testing.TB) *CLI {
	t.Helper()
	bin := Require(t, "cosign", "scripts/install-deps.sh installs cosign "+CosignVersion)
	return &CLI{bin: bin, home: t.TempDir(), Dir: t.TempDir()}
}

// NewCLI is a CLI for a program that is not a test (make bench): bin is
// the cosign binary; its HOME and the keys live under dir.
func NewCLI(bin, dir string) (*CLI, error) {
	c := &CLI{bin: bin, home: filepath.Join(dir, "home"), Dir: filepath.Join(dir, "keys")}
	for _, d := range []string{c.home, c.Dir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *CLI) run(dir string, args ...string) (string, error) {
	cmd := exec.Command(c.bin, args...)
	cmd.Dir = dir
	// No network but the registry: a sigstore TUF fetch would hang offline.
	cmd.Env = append(os.Environ(), "HOME="+c.home, "COSIGN_PASSWORD="+password, "COSIGN_YES=true", "SIGSTORE_NO_CACHE=true", "TUF_ROOT="+filepath.Join(c.home, "tuf"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		return "", err
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return out.String(), fmt.Errorf("cosign %s: %w: %s", strings.Join(args, " "), err, out.String())
		}
		return out.String(), nil
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("cosign %s: timed out: %s", strings.Join(args, " "), out.String())
	}
}

// GenerateKeyPair makes an ECDSA P-256 pair with cosign generate-key-pair
// and returns the public key's path (Dir/NAME.pub).
func (c *CLI) GenerateKeyPair(t testing.TB, name string) string {
	t.Helper()
	pub, err := c.TryGenerateKeyPair(name)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// TryGenerateKeyPair is GenerateKeyPair returning the error.
func (c *CLI) TryGenerateKeyPair(name string) (string, error) {
	if _, err := c.run(c.Dir, "generate-key-pair", "--output-key-prefix", name); err != nil {
		return "", err
	}
	return filepath.Join(c.Dir, name+".pub"), nil
}

// ImportKey imports a private key (Ed25519, RSA or ECDSA) with cosign
// import-key-pair and returns the public key's path (Dir/NAME.pub).
func (c *CLI) ImportKey(t testing.TB, name string, priv crypto.Signer) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pemPath := filepath.Join(c.Dir, name+".pem")
	if err := os.WriteFile(pemPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.run(c.Dir, "import-key-pair", "--key", pemPath, "--output-key-prefix", name); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(c.Dir, name+".pub")
}

// Layout says which signature layout Sign writes.
type Layout int

const (
	// Legacy is cosign v2's "sha256-<hex>.sig" tag.
	Legacy Layout = iota
	// Bundle is the sigstore bundle referrer cosign v3 writes
	// (cosign v2 sign --new-bundle-format).
	Bundle
)

// Sign signs the digest-pinned ref with key NAME, without a transparency
// log, in the given layout.
func (c *CLI) Sign(t testing.TB, name, ref string, layout Layout) {
	t.Helper()
	if err := c.TrySign(name, ref, layout); err != nil {
		t.Fatal(err)
	}
}

// TrySign is Sign returning the error.
func (c *CLI) TrySign(name, ref string, layout Layout) error {
	args := []string{"sign", "--key", filepath.Join(c.Dir, name+".key"), "--tlog-upload=false", "--allow-http-registry", "-y"}
	if layout == Bundle {
		args = append(args, "--new-bundle-format")
	}
	_, err := c.run(c.Dir, append(args, ref)...)
	return err
}

// InstallKey copies a public key into a trust directory under fileName.
func InstallKey(t testing.TB, pubPath, trustDir, fileName string) {
	t.Helper()
	b, err := os.ReadFile(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(trustDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(trustDir, fileName), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Proxy forwards a loopback port to a registry, so a test can make the
// registry unreachable (Close) while the registry itself keeps running.
type Proxy struct {
	// Host is "127.0.0.1:PORT", to use in image references.
	Host string

	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
}

// NewProxy forwards a new loopback port to target ("127.0.0.1:5000"); it
// closes at test cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Host: ln.Addr().String(), ln: ln, target: target, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

func (p *Proxy) forward(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c, up) {
		return
	}
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

// Close stops forwarding and cuts open connections: from now on the
// registry behind is unreachable through Host (connection refused).
func (p *Proxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
}

// DeadHost returns a loopback host:port where nothing listens: a registry
// or mirror that is down.
func DeadHost(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := ln.Addr().String()
	ln.Close()
	return host
}
