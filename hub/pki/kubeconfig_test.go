package pki

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// startHub serves p.ServerTLSConfig() on loopback with a handler that
// authenticates like the apiserver will: /healthz is open, /whoami needs a
// valid client certificate and answers 401 with the reason otherwise.
func startHub(t *testing.T, p *PKI) (port string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	})
	mux.HandleFunc("/whoami", func(w http.ResponseWriter, r *http.Request) {
		user, groups, err := p.Authenticate(r.TLS)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "%s %s HTTP/%d", user, strings.Join(groups, ","), r.ProtoMajor)
	})
	srv := &http.Server{Handler: mux, TLSConfig: p.ServerTLSConfig(), ErrorLog: log.New(io.Discard, "", 0)}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("server: %v", err)
		}
	})
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	return port
}

// get reads url with the client a kubeconfig makes.
func get(t *testing.T, kubeconfig, url string) (int, string, error) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig %s does not load: %v", kubeconfig, err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(cfg.Host + url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, strings.TrimSpace(string(body)), nil
}

func TestAdminKubeconfigAgainstTLS13Server(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	p := mustLoad(t, filepath.Join(dir, "pki"), testOptions(clock))
	port := startHub(t, p)

	for _, host := range []string{"127.0.0.1", "localhost", "[::1]"} {
		t.Run(host, func(t *testing.T) {
			if host == "[::1]" {
				if ln, err := net.Listen("tcp", "[::1]:0"); err != nil {
					t.Skipf("no IPv6 loopback: %v", err)
				} else {
					ln.Close()
				}
				// The server listens on 127.0.0.1 only; check the name
				// against the certificate instead.
				if err := p.ServingCert().VerifyHostname("::1"); err != nil {
					t.Error(err)
				}
				return
			}
			path := filepath.Join(dir, host+".kubeconfig")
			server := "https://" + net.JoinHostPort(host, port)
			if err := p.WriteAdminKubeconfig(path, server); err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("kubeconfig mode %v, want 0600", st.Mode().Perm())
			}
			cfg, err := clientcmd.LoadFromFile(path)
			if err != nil {
				t.Fatal(err)
			}
			ctx := cfg.Contexts[cfg.CurrentContext]
			if cfg.CurrentContext != "flotilla" || ctx == nil || ctx.Cluster != "flotilla" || ctx.AuthInfo != AdminUser {
				t.Errorf("current context %q = %+v, want flotilla → cluster flotilla, user %s", cfg.CurrentContext, ctx, AdminUser)
			}
			if c := cfg.Clusters["flotilla"]; c == nil || c.Server != server {
				t.Errorf("cluster flotilla = %+v, want server %s", c, server)
			}
			code, body, err := get(t, path, "/whoami")
			if err != nil {
				t.Fatal(err)
			}
			if want := "flotilla:admin system:masters HTTP/2"; code != http.StatusOK || body != want {
				t.Errorf("GET /whoami = %d %q, want 200 %q", code, body, want)
			}
		})
	}
}

func TestRefusedClientsGet401(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	p := mustLoad(t, filepath.Join(dir, "pki"), testOptions(clock))
	other := mustLoad(t, filepath.Join(dir, "other"), testOptions(nil))
	server := "https://127.0.0.1:" + startHub(t, p)

	// Another CA's admin, trusting our CA for the server.
	foreignCert, foreignKey := other.AdminCredentials()
	foreign := filepath.Join(dir, "foreign.kubeconfig")
	if err := WriteKubeconfig(foreign, server, p.CACertPEM(), foreignCert, foreignKey, AdminUser); err != nil {
		t.Fatal(err)
	}
	shortCert, shortKey, err := p.IssueClientCert("shortlived", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	expired := filepath.Join(dir, "expired.kubeconfig")
	if err := WriteKubeconfig(expired, server, p.CACertPEM(), shortCert, shortKey, "shortlived"); err != nil {
		t.Fatal(err)
	}
	admin := filepath.Join(dir, "admin.kubeconfig")
	if err := p.WriteAdminKubeconfig(admin, server); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)

	for _, tc := range []struct {
		name, kubeconfig string
		want             error
	}{
		{"certificate from another CA", foreign, ErrUntrustedCert},
		{"expired certificate", expired, ErrExpiredCert},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, err := get(t, tc.kubeconfig, "/whoami")
			if err != nil {
				t.Fatalf("request failed before reaching the handler: %v", err)
			}
			if code != http.StatusUnauthorized || !strings.Contains(body, tc.want.Error()) {
				t.Errorf("GET /whoami = %d %q, want 401 saying %q", code, body, tc.want)
			}
		})
	}
	if code, body, err := get(t, admin, "/whoami"); err != nil || code != http.StatusOK {
		t.Errorf("admin after the clock moved: %d %q %v, want 200", code, body, err)
	}

	// Without a client certificate requests still reach the handler.
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.CAPool()}}}
	defer noCert.CloseIdleConnections()
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/whoami": http.StatusUnauthorized} {
		resp, err := noCert.Get(server + path)
		if err != nil {
			t.Fatalf("GET %s without a certificate: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without a certificate = %d, want %d", path, resp.StatusCode, want)
		}
	}

	// TLS 1.2 is refused at the handshake.
	old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.CAPool(), MaxVersion: tls.VersionTLS12}}}
	defer old.CloseIdleConnections()
	if resp, err := old.Get(server + "/healthz"); err == nil {
		resp.Body.Close()
		t.Error("a TLS 1.2 client was served")
	}
}

func TestWriteKubeconfigRefusesBadInput(t *testing.T) {
	p := mustLoad(t, t.TempDir(), testOptions(nil))
	certPEM, keyPEM := p.AdminCredentials()
	path := filepath.Join(t.TempDir(), "k")
	for _, tc := range []struct {
		name, server, user string
		ca                 []byte
	}{
		{"plain http", "http://127.0.0.1:6443", "u", p.CACertPEM()},
		{"no host", "https://", "u", p.CACertPEM()},
		{"not a URL", "::", "u", p.CACertPEM()},
		{"no user", "https://127.0.0.1:6443", "", p.CACertPEM()},
		{"no CA", "https://127.0.0.1:6443", "u", nil},
	} {
		if err := WriteKubeconfig(path, tc.server, tc.ca, certPEM, keyPEM, tc.user); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("a refused kubeconfig was written")
	}
}
