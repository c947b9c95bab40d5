package registry

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
)

// ErrInvalidConfig is returned by Config.Validate.
var ErrInvalidConfig = errors.New("invalid registry configuration")

// Config says how to reach registries. Keys of Hosts are registry hosts as
// they appear in references ("docker.io", "registry.local:5000"); a mirror
// that needs its own credentials or TLS settings gets its own entry too.
type Config struct {
	Hosts map[string]HostConfig `json:"hosts,omitempty" mapstructure:"hosts"`
}

// HostConfig configures one registry host.
type HostConfig struct {
	// Mirrors are tried in order before the registry itself, for pulls:
	// "https://mirror.local:5000" or "http://10.0.0.5:5000" (a URL without
	// a scheme means https).
	Mirrors []string `json:"mirrors,omitempty" mapstructure:"mirrors"`
	// PlainHTTP talks HTTP instead of HTTPS. Loopback hosts (localhost,
	// 127.0.0.0/8, ::1) always use plain HTTP, as Docker and containerd do.
	PlainHTTP bool `json:"plainHTTP,omitempty" mapstructure:"plainHTTP"`
	// CAFile adds a PEM CA bundle to the system roots for this host.
	CAFile string `json:"caFile,omitempty" mapstructure:"caFile"`
	// InsecureSkipVerify turns off TLS verification for this host.
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty" mapstructure:"insecureSkipVerify"`
	// Username and Password are basic credentials; IdentityToken (a
	// long-lived token) is used instead when set.
	Username      string `json:"username,omitempty" mapstructure:"username"`
	Password      string `json:"password,omitempty" mapstructure:"password"`
	IdentityToken string `json:"identityToken,omitempty" mapstructure:"identityToken"`
}

// Validate checks mirrors and CA files, naming the host at fault.
func (c Config) Validate() error {
	var errs []error
	for _, host := range sortedKeys(c.Hosts) {
		h := c.Hosts[host]
		if host == "" || strings.Contains(host, "/") {
			errs = append(errs, fmt.Errorf("%w: host key %q must be a registry host such as registry.local:5000", ErrInvalidConfig, host))
		}
		for _, m := range h.Mirrors {
			if _, err := parseEndpoint(m); err != nil {
				errs = append(errs, fmt.Errorf("%w: host %q mirror: %v", ErrInvalidConfig, host, err))
			}
		}
		if h.CAFile != "" {
			if _, err := loadCA(h.CAFile); err != nil {
				errs = append(errs, fmt.Errorf("%w: host %q: %v", ErrInvalidConfig, host, err))
			}
		}
	}
	return errors.Join(errs...)
}

// endpoint is a parsed mirror URL.
type endpoint struct {
	scheme, host, path string
}

func parseEndpoint(s string) (endpoint, error) {
	raw := s
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return endpoint{}, fmt.Errorf("%q is not a URL: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return endpoint{}, fmt.Errorf("%q: scheme must be http or https", raw)
	}
	if u.Host == "" {
		return endpoint{}, fmt.Errorf("%q has no host", raw)
	}
	p := strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(p, "/v2") {
		p += "/v2"
	}
	return endpoint{scheme: u.Scheme, host: u.Host, path: p}, nil
}

func loadCA(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", file)
	}
	return pool, nil
}

func sortedKeys(m map[string]HostConfig) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// isLoopback reports whether a registry host (with optional port) is this
// machine.
func isLoopback(host string) bool {
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = strings.Trim(host, "[]")
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// RegistryHosts returns the containerd host list for each registry: its
// mirrors (pull and resolve only), then the registry itself.
// HTTP clients are built once per endpoint and reused across pulls.
func (c Config) RegistryHosts() docker.RegistryHosts {
	var mu sync.Mutex
	cache := map[endpoint]docker.RegistryHost{}
	get := func(ep endpoint, caps docker.HostCapabilities) (docker.RegistryHost, error) {
		mu.Lock()
		defer mu.Unlock()
		if rh, ok := cache[ep]; ok {
			rh.Capabilities = caps
			return rh, nil
		}
		rh, err := c.registryHost(ep, caps)
		if err == nil {
			cache[ep] = rh
		}
		return rh, err
	}
	return func(host string) ([]docker.RegistryHost, error) {
		hc := c.Hosts[host]
		var out []docker.RegistryHost
		for _, m := range hc.Mirrors {
			ep, err := parseEndpoint(m)
			if err != nil {
				return nil, fmt.Errorf("%w: host %q mirror: %v", ErrInvalidConfig, host, err)
			}
			rh, err := get(ep, docker.HostCapabilityPull|docker.HostCapabilityResolve)
			if err != nil {
				return nil, err
			}
			out = append(out, rh)
		}
		upstream := host
		if host == "docker.io" {
			upstream = "registry-1.docker.io"
		}
		scheme := "https"
		if hc.PlainHTTP || isLoopback(host) {
			scheme = "http"
		}
		rh, err := get(endpoint{scheme: scheme, host: upstream, path: "/v2"},
			docker.HostCapabilityPull|docker.HostCapabilityResolve|docker.HostCapabilityPush)
		if err != nil {
			return nil, err
		}
		return append(out, rh), nil
	}
}

// registryHost builds the client for one endpoint; TLS settings and
// credentials are looked up under the endpoint's own host key (for the
// registry itself under the reference's host, "docker.io" included).
func (c Config) registryHost(ep endpoint, caps docker.HostCapabilities) (docker.RegistryHost, error) {
	key := ep.host
	if key == "registry-1.docker.io" {
		if _, ok := c.Hosts[key]; !ok {
			key = "docker.io"
		}
	}
	hc := c.Hosts[key]
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: hc.InsecureSkipVerify}
	if hc.CAFile != "" {
		pool, err := loadCA(hc.CAFile)
		if err != nil {
			return docker.RegistryHost{}, fmt.Errorf("%w: host %q: %v", ErrInvalidConfig, key, err)
		}
		tlsCfg.RootCAs = pool
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsCfg,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: time.Minute,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConns:          10,
	}
	client := &http.Client{Transport: tr}
	auth := docker.NewDockerAuthorizer(
		docker.WithAuthClient(client),
		docker.WithAuthCreds(func(h string) (string, string, error) {
			hc, ok := c.Hosts[h]
			if !ok && h == "registry-1.docker.io" {
				hc = c.Hosts["docker.io"]
			}
			if hc.IdentityToken != "" {
				return "", hc.IdentityToken, nil
			}
			return hc.Username, hc.Password, nil
		}),
	)
	return docker.RegistryHost{
		Client:       client,
		Authorizer:   auth,
		Host:         ep.host,
		Scheme:       ep.scheme,
		Path:         ep.path,
		Capabilities: caps,
	}, nil
}

// ResolverOptions are containerd's docker resolver options for c.
func (c Config) ResolverOptions() docker.ResolverOptions {
	return docker.ResolverOptions{Hosts: c.RegistryHosts()}
}

// Resolver is a containerd resolver for c.
func (c Config) Resolver() remotes.Resolver {
	return docker.NewResolver(c.ResolverOptions())
}
