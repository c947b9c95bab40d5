package registry

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
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

// Config says how to reach registries, as containerd's hosts.toml does.
// Keys of Hosts are registry hosts as they appear in references
// ("docker.io", "registry.local:5000"); a mirror that needs its own
// credentials or TLS settings gets its own entry too, under its host[:port].
// In agent.yaml:
//
//	registries:
//	  hosts:
//	    docker.io:
//	      mirrors: ["http://10.0.0.5:5000", "https://mirror.local"]
//	    mirror.local:
//	      caFile: /etc/flotilla/registry-ca.pem
//	      credentialsFile: /etc/flotilla/mirror-credentials
//	    registry.local:5000:
//	      plainHTTP: true
type Config struct {
	Hosts map[string]HostConfig `json:"hosts,omitempty" mapstructure:"hosts"`
}

// HostConfig configures one registry host.
type HostConfig struct {
	// Mirrors are tried in order before the registry itself, for pulls:
	// "https://mirror.local:5000" or "http://10.0.0.5:5000" (a URL without
	// a scheme means https). A mirror that fails (down, refusing, or
	// without the image) falls through to the next, then to the registry;
	// content is checked against the digests the reference pins, so a
	// mirror cannot substitute an image.
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
	// CredentialsFile holds the credentials instead, so that they can live
	// in a mounted Secret and rotate without a restart: it is read at each
	// authentication. Either "username:password" on one line, or JSON
	// {"username": ..., "password": ...} or {"identityToken": ...}.
	CredentialsFile string `json:"credentialsFile,omitempty" mapstructure:"credentialsFile"`
}

// credentials returns the basic credentials or identity token of h.
func (h HostConfig) credentials() (user, secret string, err error) {
	if h.CredentialsFile == "" {
		if h.IdentityToken != "" {
			return "", h.IdentityToken, nil
		}
		return h.Username, h.Password, nil
	}
	b, err := os.ReadFile(h.CredentialsFile)
	if err != nil {
		return "", "", fmt.Errorf("read credentials file: %w", err)
	}
	text := strings.TrimSpace(string(b))
	if strings.HasPrefix(text, "{") {
		var c struct {
			Username      string `json:"username"`
			Password      string `json:"password"`
			IdentityToken string `json:"identityToken"`
		}
		if err := json.Unmarshal([]byte(text), &c); err != nil {
			return "", "", fmt.Errorf("credentials file %s: not JSON: %v", h.CredentialsFile, err)
		}
		if c.IdentityToken != "" {
			return "", c.IdentityToken, nil
		}
		if c.Username == "" {
			return "", "", fmt.Errorf("credentials file %s: no username or identityToken", h.CredentialsFile)
		}
		return c.Username, c.Password, nil
	}
	user, pass, ok := strings.Cut(text, ":")
	if !ok || user == "" || strings.Contains(text, "\n") {
		return "", "", fmt.Errorf("credentials file %s: want one line username:password, or JSON", h.CredentialsFile)
	}
	return user, pass, nil
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
		if h.CredentialsFile != "" {
			if h.Username != "" || h.Password != "" || h.IdentityToken != "" {
				errs = append(errs, fmt.Errorf("%w: host %q: credentialsFile excludes username, password and identityToken", ErrInvalidConfig, host))
			} else if _, _, err := h.credentials(); err != nil {
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
			rh, err := get(ep, docker.HostCapabilityPull|docker.HostCapabilityResolve|docker.HostCapabilityReferrers)
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
			docker.HostCapabilityPull|docker.HostCapabilityResolve|docker.HostCapabilityPush|docker.HostCapabilityReferrers)
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
	auth := docker.NewDockerAuthorizer(docker.WithAuthClient(client), docker.WithAuthCreds(c.hostCredentials))
	return docker.RegistryHost{
		Client:       client,
		Authorizer:   auth,
		Host:         ep.host,
		Scheme:       ep.scheme,
		Path:         ep.path,
		Capabilities: caps,
	}, nil
}

// hostCredentials answers the authorizer for host from the configuration.
func (c Config) hostCredentials(host string) (string, string, error) {
	hc, ok := c.Hosts[host]
	if !ok && host == "registry-1.docker.io" {
		hc = c.Hosts["docker.io"]
	}
	return hc.credentials()
}

// withKeychain returns hosts whose authorizers try keys before the
// configured credentials; keys is called only when a registry asks for
// credentials. One authorizer per endpoint for the life of the returned
// function (one pull), so a pull asks for a token once.
func (c Config) withKeychain(hosts docker.RegistryHosts, keys func() Keychain) docker.RegistryHosts {
	var mu sync.Mutex
	auths := map[string]docker.Authorizer{}
	creds := func(host string) (string, string, error) {
		if a, ok := keys().Lookup(host); ok {
			user, secret := a.pair()
			return user, secret, nil
		}
		return c.hostCredentials(host)
	}
	return func(host string) ([]docker.RegistryHost, error) {
		rhs, err := hosts(host)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		for i := range rhs {
			key := rhs[i].Scheme + "://" + rhs[i].Host
			a, ok := auths[key]
			if !ok {
				a = docker.NewDockerAuthorizer(docker.WithAuthClient(rhs[i].Client), docker.WithAuthCreds(creds))
				auths[key] = a
			}
			rhs[i].Authorizer = a
		}
		return rhs, nil
	}
}

// ResolverOptions are containerd's docker resolver options for c.
func (c Config) ResolverOptions() docker.ResolverOptions {
	return docker.ResolverOptions{Hosts: c.RegistryHosts()}
}

// Resolver is a containerd resolver for c.
func (c Config) Resolver() remotes.Resolver {
	return docker.NewResolver(c.ResolverOptions())
}
