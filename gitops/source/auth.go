package source

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Keys of a credentials Secret.
const (
	KeyUsername    = "username"
	KeyPassword    = "password"
	KeyBearerToken = "bearerToken"
	KeyIdentity    = "identity"
	KeyKnownHosts  = "known_hosts"
)

// ErrCredentials means the credentials Secret does not fit the URL.
var ErrCredentials = errors.New("unusable credentials")

// Credentials are the contents of a GitSource's credentials Secret. They
// are only ever handed to the transport; String never shows them.
type Credentials map[string][]byte

// String keeps credentials out of logs and error messages.
func (c Credentials) String() string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return fmt.Sprintf("credentials(keys %s)", strings.Join(keys, ","))
}

// GoString keeps credentials out of %#v.
func (c Credentials) GoString() string { return c.String() }

// transportAuth builds the transport's authentication for url. stateDir
// holds the known_hosts file the SSH host key check reads.
func transportAuth(rawURL string, creds Credentials, stateDir string) (transport.AuthMethod, error) {
	ep, err := transport.NewEndpoint(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parsing the repository URL: %w", err)
	}
	switch ep.Protocol {
	case "http", "https":
		if creds == nil {
			return nil, nil
		}
		if tok := creds[KeyBearerToken]; len(tok) > 0 {
			return &githttp.TokenAuth{Token: strings.TrimSpace(string(tok))}, nil
		}
		if len(creds[KeyUsername]) > 0 || len(creds[KeyPassword]) > 0 {
			user := string(creds[KeyUsername])
			if user == "" {
				// Forges accept any user name with a token as password.
				user = "git"
			}
			return &githttp.BasicAuth{Username: user, Password: string(creds[KeyPassword])}, nil
		}
		return nil, fmt.Errorf("%w: an https:// source needs %q and %q, or %q in its Secret", ErrCredentials, KeyUsername, KeyPassword, KeyBearerToken)
	case "ssh":
		if creds == nil || len(creds[KeyIdentity]) == 0 {
			return nil, fmt.Errorf("%w: an ssh:// source needs a private key under %q (and %q) in spec.secretRef", ErrCredentials, KeyIdentity, KeyKnownHosts)
		}
		if len(creds[KeyKnownHosts]) == 0 {
			return nil, fmt.Errorf("%w: an ssh:// source needs the server's host keys under %q: the hub does not trust unknown hosts", ErrCredentials, KeyKnownHosts)
		}
		user := ep.User
		if user == "" {
			user = "git"
		}
		keys, err := gitssh.NewPublicKeys(user, creds[KeyIdentity], string(creds[KeyPassword]))
		if err != nil {
			// The parser's error never quotes the key.
			return nil, fmt.Errorf("%w: the private key under %q: %v", ErrCredentials, KeyIdentity, err)
		}
		khFile := filepath.Join(stateDir, "known_hosts")
		if err := os.WriteFile(khFile, creds[KeyKnownHosts], 0o600); err != nil {
			return nil, fmt.Errorf("writing known_hosts: %w", err)
		}
		cb, err := knownhosts.New(khFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", ErrCredentials, KeyKnownHosts, err)
		}
		keys.HostKeyCallback = cb
		return keys, nil
	case "file":
		return nil, nil
	}
	if creds != nil {
		return nil, fmt.Errorf("%w: credentials are only sent over https:// or ssh://, not %s://", ErrCredentials, ep.Protocol)
	}
	return nil, nil
}

// RedactURL drops any password from a URL before it is shown.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	return u.Redacted()
}
