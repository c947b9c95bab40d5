package registry

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"sort"
	"strings"
)

// ErrInvalidDockerConfig is returned for an image pull secret whose
// content is not a Docker config.
var ErrInvalidDockerConfig = errors.New("invalid docker config")

// Auth is one registry's credentials: a username and password, or an
// identity token (a long-lived refresh token) instead.
type Auth struct {
	Username      string
	Password      string
	IdentityToken string
}

func (a Auth) pair() (user, secret string) {
	if a.IdentityToken != "" {
		return "", a.IdentityToken
	}
	return a.Username, a.Password
}

// Keychain holds credentials by registry host, as a pod's image pull
// secrets give them. Keys are hosts as references name them ("docker.io",
// "registry.local:5000") or a wildcard for one DNS label
// ("*.registry.example"), as the kubelet matches them.
type Keychain map[string]Auth

// Lookup returns the credentials for host: an exact entry first, then a
// wildcard one.
func (k Keychain) Lookup(host string) (Auth, bool) {
	host = canonicalHost(host)
	if a, ok := k[host]; ok {
		return a, true
	}
	keys := make([]string, 0, len(k))
	for key := range k {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if !strings.Contains(key, "*") {
			continue
		}
		// One label per '*' as the kubelet matches ("*.example.com" takes
		// "a.example.com", not "a.b.example.com"); ports must match.
		if ok, _ := path.Match(strings.ReplaceAll(key, ".", "/"), strings.ReplaceAll(host, ".", "/")); ok {
			return k[key], true
		}
	}
	return Auth{}, false
}

// Merge adds other's entries that k does not have: the first secret that
// names a host wins, as it does for the kubelet.
func (k Keychain) Merge(other Keychain) Keychain {
	if k == nil {
		k = Keychain{}
	}
	for host, a := range other {
		if _, ok := k[host]; !ok {
			k[host] = a
		}
	}
	return k
}

// fingerprint identifies the credentials, so that pulls of one image with
// different credentials do not share an outcome.
func (k Keychain) fingerprint() string {
	if len(k) == 0 {
		return ""
	}
	b, _ := json.Marshal(k) // map keys are sorted
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// ParseDockerConfig reads the credentials of an image pull secret: the
// ".dockerconfigjson" of a kubernetes.io/dockerconfigjson Secret
// ({"auths": {host: entry}}), or the ".dockercfg" of the older
// kubernetes.io/dockercfg type ({host: entry}). An entry has "username" and
// "password", or "auth" (base64 of "username:password"), or an
// "identitytoken". Hosts may be written as URLs
// ("https://index.docker.io/v1/"); they are reduced to the host.
func ParseDockerConfig(data []byte) (Keychain, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: not a JSON object: %v", ErrInvalidDockerConfig, err)
	}
	entries := raw
	if auths, ok := raw["auths"]; ok {
		entries = nil
		if err := json.Unmarshal(auths, &entries); err != nil {
			return nil, fmt.Errorf("%w: \"auths\" is not an object of registries: %v", ErrInvalidDockerConfig, err)
		}
	}
	k := Keychain{}
	for key, msg := range entries {
		var e struct {
			Username      string `json:"username"`
			Password      string `json:"password"`
			Auth          string `json:"auth"`
			IdentityToken string `json:"identitytoken"`
		}
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, fmt.Errorf("%w: registry %q: not an object with username, password, auth or identitytoken: %v", ErrInvalidDockerConfig, key, err)
		}
		a := Auth{Username: e.Username, Password: e.Password, IdentityToken: e.IdentityToken}
		if e.Auth != "" {
			b, err := base64.StdEncoding.DecodeString(e.Auth)
			if err != nil {
				return nil, fmt.Errorf("%w: registry %q: auth is not base64: %v", ErrInvalidDockerConfig, key, err)
			}
			user, pass, ok := strings.Cut(string(b), ":")
			if !ok {
				return nil, fmt.Errorf("%w: registry %q: auth does not decode to username:password", ErrInvalidDockerConfig, key)
			}
			a.Username, a.Password = user, pass
		}
		if a.Username == "" && a.IdentityToken == "" {
			return nil, fmt.Errorf("%w: registry %q: no username or identitytoken", ErrInvalidDockerConfig, key)
		}
		host := configHost(key)
		if host == "" {
			return nil, fmt.Errorf("%w: %q names no registry host", ErrInvalidDockerConfig, key)
		}
		if _, dup := k[host]; !dup {
			k[host] = a
		}
	}
	return k, nil
}

// configHost reduces a docker config key ("https://index.docker.io/v1/",
// "registry.local:5000/team") to the registry host it names.
func configHost(key string) string {
	key = strings.TrimSpace(key)
	if strings.Contains(key, "://") {
		if u, err := url.Parse(key); err == nil {
			key = u.Host
		}
	}
	key, _, _ = strings.Cut(key, "/")
	return canonicalHost(strings.ToLower(key))
}

// canonicalHost names Docker Hub the way references do.
func canonicalHost(host string) string {
	switch host {
	case "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com":
		return "docker.io"
	}
	return host
}
