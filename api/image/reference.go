package image

import (
	"errors"
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
)

var (
	// ErrInvalidReference is wrapped by every error for a string that is
	// not an image reference.
	ErrInvalidReference = errors.New("invalid image reference")
	// ErrNotPinned is wrapped by the error for a reference that names only
	// a tag (or a digest other than sha256) under a policy that needs a
	// sha256 digest.
	ErrNotPinned = errors.New("image reference is not pinned to a digest")
)

// Error is a reference the grammar or the digest policy refuses.
type Error struct {
	// Input is the reference as it was given.
	Input string
	// Kind is ErrInvalidReference or ErrNotPinned.
	Kind error
	// Reason says what is wrong and, where there is something to do, what
	// to do; it does not repeat Input.
	Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("%v %q: %s", e.Kind, e.Input, e.Reason) }

// Unwrap lets errors.Is find Kind.
func (e *Error) Unwrap() error { return e.Kind }

func invalidf(input, format string, args ...any) error {
	return &Error{Input: input, Kind: ErrInvalidReference, Reason: fmt.Sprintf(format, args...)}
}

const (
	// DefaultDomain is the registry of references that name none.
	DefaultDomain = "docker.io"
	// legacyDefaultDomain is another spelling of DefaultDomain.
	legacyDefaultDomain = "index.docker.io"
	// officialRepoPrefix is where docker.io keeps one-component names.
	officialRepoPrefix = "library/"
	// DefaultTag is the tag a reference with neither tag nor digest gets.
	DefaultTag = "latest"
	// MaxPathLength bounds the normalised repository path.
	MaxPathLength = 255
	// maxTagLength bounds a tag.
	maxTagLength = 128
)

// Reference is a normalised image reference: "nginx:1.25" is Domain
// "docker.io", Path "library/nginx", Tag "1.25". Two references to the same
// image written differently ("nginx", "docker.io/library/nginx") are equal
// with ==.
type Reference struct {
	Domain string
	Path   string
	// Tag is empty when none was written (see Defaulted).
	Tag string
	// Digest is empty when none was written.
	Digest digest.Digest
}

// Parse reads s with the grammar of the package documentation. Errors wrap
// ErrInvalidReference.
func Parse(s string) (Reference, error) {
	if s == "" {
		return Reference{}, invalidf(s, "must not be empty")
	}
	if i := strings.IndexFunc(s, isSpace); i >= 0 {
		return Reference{}, invalidf(s, "must not contain whitespace")
	}
	if isImageID(s) {
		return Reference{}, invalidf(s, "a bare 64-hex-digit string is an image ID, not a reference; name the repository: REPOSITORY@sha256:%s", s)
	}
	var r Reference
	rest := s
	if i := strings.IndexByte(rest, '@'); i >= 0 {
		d, err := parseDigest(rest[i+1:])
		if err != nil {
			return Reference{}, invalidf(s, "%v", err)
		}
		r.Digest = d
		rest = rest[:i]
	}
	// A tag follows the last ':' that comes after the last '/': a ':'
	// before a '/' belongs to the host's port.
	if i := strings.LastIndexByte(rest, ':'); i >= 0 && i > strings.LastIndexByte(rest, '/') {
		tag := rest[i+1:]
		if err := checkTag(tag); err != nil {
			return Reference{}, invalidf(s, "%v", err)
		}
		r.Tag = tag
		rest = rest[:i]
	}
	domain, path, err := splitName(rest)
	if err != nil {
		return Reference{}, invalidf(s, "%v", err)
	}
	r.Domain, r.Path = domain, path
	return r, nil
}

// splitName normalises a repository name (no tag, no digest) into host and
// path, and checks both.
func splitName(name string) (domain, path string, err error) {
	if name == "" {
		return "", "", errors.New("repository name must not be empty")
	}
	first, remainder, hasSlash := strings.Cut(name, "/")
	switch {
	case !hasSlash:
		domain, path = DefaultDomain, name
	case first == legacyDefaultDomain:
		domain, path = DefaultDomain, remainder
	case looksLikeHost(first):
		domain, path = first, remainder
	default:
		domain, path = DefaultDomain, name
	}
	if domain != DefaultDomain {
		if err := checkHost(domain); err != nil {
			return "", "", err
		}
	}
	if domain == DefaultDomain && !strings.Contains(path, "/") {
		path = officialRepoPrefix + path
	}
	if err := checkPath(path); err != nil {
		return "", "", err
	}
	return domain, path, nil
}

// looksLikeHost is Docker's test for "the first component is a registry".
func looksLikeHost(c string) bool {
	return c == "localhost" || strings.ContainsAny(c, ".:") || strings.ToLower(c) != c
}

// checkHost accepts DNS-like names ("registry.local", "Registry.Local")
// and bracketed IPv6 addresses, each with an optional numeric port.
func checkHost(h string) error {
	host, port := h, ""
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return fmt.Errorf("registry host %q is not a valid host[:port]: unclosed '['", h)
		}
		host, port = h[:end+1], h[end+1:]
		inner := host[1:end]
		if inner == "" || !allRunes(inner, isIPv6Char) {
			return fmt.Errorf("registry host %q is not a valid host[:port]: an IPv6 address is hex digits and ':' in brackets", h)
		}
	} else {
		if i := strings.IndexByte(h, ':'); i >= 0 {
			host, port = h[:i], h[i:]
		}
		for _, label := range strings.Split(host, ".") {
			if !validLabel(label) {
				return fmt.Errorf("registry host %q is not a valid host[:port]: each dot-separated part must be letters, digits and '-', not starting or ending with '-'", h)
			}
		}
	}
	if port != "" {
		if port[0] != ':' || len(port) == 1 || !allRunes(port[1:], isDigit) {
			return fmt.Errorf("registry host %q is not a valid host[:port]: the port must be digits", h)
		}
	}
	return nil
}

func validLabel(l string) bool {
	if l == "" || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	return allRunes(l, func(r rune) bool { return isAlnum(r) || r == '-' })
}

// checkPath checks a normalised repository path.
func checkPath(path string) error {
	if len(path) > MaxPathLength {
		return fmt.Errorf("repository path must be at most %d characters (with docker.io's %q for one-component names)", MaxPathLength, officialRepoPrefix)
	}
	for _, c := range strings.Split(path, "/") {
		if !validComponent(c) {
			if c == "" {
				return errors.New("repository path must not have an empty component (\"//\", or a leading or trailing '/')")
			}
			return fmt.Errorf("repository path component %q must be lowercase letters and digits, separated by '.', '_', '__' or '-'", c)
		}
	}
	return nil
}

// validComponent is [a-z0-9]+ ((\.|_|__|-+) [a-z0-9]+)*.
func validComponent(c string) bool {
	if c == "" {
		return false
	}
	i := 0
	for {
		start := i
		for i < len(c) && isLowerAlnum(c[i]) {
			i++
		}
		if i == start {
			return false // a separator must be followed by, and the component start with, [a-z0-9]
		}
		if i == len(c) {
			return true
		}
		switch c[i] {
		case '.':
			i++
		case '_':
			i++
			if i < len(c) && c[i] == '_' {
				i++
			}
		case '-':
			for i < len(c) && c[i] == '-' {
				i++
			}
		default:
			return false
		}
	}
}

func checkTag(tag string) error {
	ok := tag != "" && len(tag) <= maxTagLength && isWord(rune(tag[0]))
	if ok {
		ok = allRunes(tag, func(r rune) bool { return isWord(r) || r == '.' || r == '-' })
	}
	if !ok {
		return fmt.Errorf("tag %q must be 1 to %d letters, digits, '_', '.' or '-', not starting with '.' or '-'", tag, maxTagLength)
	}
	return nil
}

// digestLengths are the hex lengths of the algorithms a device can check.
var digestLengths = map[digest.Algorithm]int{digest.SHA256: 64, digest.SHA384: 96, digest.SHA512: 128}

func parseDigest(s string) (digest.Digest, error) {
	alg, enc, ok := strings.Cut(s, ":")
	if !ok || alg == "" {
		return "", fmt.Errorf("digest %q must be algorithm:hex, as in sha256:<64 hex digits>", s)
	}
	n, known := digestLengths[digest.Algorithm(alg)]
	if !known {
		return "", fmt.Errorf("digest algorithm %q is not supported: use sha256:<64 hex digits>", alg)
	}
	if len(enc) != n || !allRunes(enc, isLowerHex) {
		return "", fmt.Errorf("digest %q must be %s: followed by %d lowercase hex digits", s, alg, n)
	}
	return digest.Digest(s), nil
}

func isImageID(s string) bool { return len(s) == 64 && allRunes(s, isLowerHex) }

// Name is the repository: "docker.io/library/nginx".
func (r Reference) Name() string { return r.Domain + "/" + r.Path }

// FamiliarName is the repository as people write it: docker.io and its
// library/ prefix dropped ("nginx", "team/app", "registry.local/app").
func (r Reference) FamiliarName() string {
	if r.Domain != DefaultDomain {
		return r.Name()
	}
	if rest, ok := strings.CutPrefix(r.Path, officialRepoPrefix); ok && !strings.Contains(rest, "/") {
		return rest
	}
	return r.Path
}

// Pinned reports whether the reference names a digest (of any supported
// algorithm): such a reference cannot move.
func (r Reference) Pinned() bool { return r.Digest != "" }

// PinnedSHA256 reports whether the reference names a sha256 digest, the
// kind the digest policy requires.
func (r Reference) PinnedSHA256() bool {
	return strings.HasPrefix(string(r.Digest), string(digest.SHA256)+":")
}

// Defaulted returns r with the tag "latest" when it names neither tag nor
// digest, as Docker and Kubernetes read "nginx".
func (r Reference) Defaulted() Reference {
	if r.Tag == "" && r.Digest == "" {
		r.Tag = DefaultTag
	}
	return r
}

// String is the full normalised reference, tag and digest included; Parse
// reads it back to an equal Reference.
func (r Reference) String() string {
	s := r.Name()
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest.String()
	}
	return s
}

// PullName is what is resolved and what the image is called in a local
// store: by digest when there is one (a tag beside it is only a label),
// else by tag ("latest" when none was written).
func (r Reference) PullName() string {
	if r.Digest != "" {
		return r.Name() + "@" + r.Digest.String()
	}
	return r.Name() + ":" + r.Defaulted().Tag
}

func allRunes(s string, ok func(rune) bool) bool {
	for _, r := range s {
		if !ok(r) {
			return false
		}
	}
	return true
}

func isSpace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f'
}
func isDigit(r rune) bool      { return r >= '0' && r <= '9' }
func isLowerHex(r rune) bool   { return isDigit(r) || (r >= 'a' && r <= 'f') }
func isAlnum(r rune) bool      { return isDigit(r) || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') }
func isWord(r rune) bool       { return isAlnum(r) || r == '_' }
func isLowerAlnum(b byte) bool { return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') }
func isIPv6Char(r rune) bool {
	return isDigit(r) || (r >= 'a' && r <= 'f') || (r >= 'A' && r <= 'F') || r == ':'
}
