package image

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidPattern is wrapped by errors for a repository pattern that
// cannot match any reference.
var ErrInvalidPattern = errors.New("invalid image pattern")

// Pattern selects repositories. It is written like a repository name,
// without tag or digest, and normalised the way references are ("busybox"
// is docker.io/library/busybox), with these additions:
//
//   - "*" in a pattern matches any run of characters, "/" included, so
//     "registry.local:5000/*" is every repository on that registry and
//     "docker.io/library/*" every official image;
//   - "*" alone matches every repository;
//   - a host alone, without "/" ("registry.local:5000", "docker.io"),
//     matches every repository on it, because a one-word repository name
//     rarely contains "." or ":" while a host almost always does.
//
// Hosts compare case-insensitively, as DNS names do.
type Pattern struct {
	raw  string
	norm string // "*", "HOST/*" or a normalised name glob, lower-case
}

// ParsePattern checks and normalises a pattern.
func ParsePattern(s string) (Pattern, error) {
	if s == "" {
		return Pattern{}, fmt.Errorf("%w: must not be empty", ErrInvalidPattern)
	}
	if strings.ContainsAny(s, "@") || strings.LastIndexByte(s, ':') > strings.LastIndexByte(s, '/') && strings.Contains(s, "/") {
		return Pattern{}, fmt.Errorf("%w %q: name repositories only, without a tag or digest", ErrInvalidPattern, s)
	}
	if s == "*" {
		return Pattern{raw: s, norm: "*"}, nil
	}
	if !strings.Contains(s, "/") && (strings.ContainsAny(s, ".:") || s == "localhost") {
		host := s
		if host == legacyDefaultDomain {
			host = DefaultDomain
		}
		if err := checkHost(probe(host)); err != nil {
			return Pattern{}, fmt.Errorf("%w %q: a pattern without '/' names a registry host[:port] (and a tag is not allowed): %v", ErrInvalidPattern, s, err)
		}
		return Pattern{raw: s, norm: strings.ToLower(host) + "/*"}, nil
	}
	// Normalise as a name: "*" never decides where the host ends, since
	// only "/", ".", ":" and upper case do.
	first, remainder, hasSlash := strings.Cut(s, "/")
	var domain, path string
	switch {
	case !hasSlash:
		domain, path = DefaultDomain, s
	case first == legacyDefaultDomain:
		domain, path = DefaultDomain, remainder
	case looksLikeHost(first):
		domain, path = first, remainder
	default:
		domain, path = DefaultDomain, s
	}
	if domain == DefaultDomain && !strings.Contains(path, "/") {
		path = officialRepoPrefix + path
	}
	// Check against the reference grammar with every "*" standing for one
	// valid character: a pattern that cannot match any valid name is a
	// mistake worth reporting when the configuration is loaded.
	if domain != DefaultDomain {
		if err := checkHost(probe(domain)); err != nil {
			return Pattern{}, fmt.Errorf("%w %q: %v", ErrInvalidPattern, s, err)
		}
	}
	if err := checkPath(probe(path)); err != nil {
		return Pattern{}, fmt.Errorf("%w %q: %v", ErrInvalidPattern, s, err)
	}
	return Pattern{raw: s, norm: strings.ToLower(domain + "/" + path)}, nil
}

func probe(s string) string { return strings.ReplaceAll(s, "*", "x") }

// MustParsePattern is ParsePattern for patterns known to be valid.
func MustParsePattern(s string) Pattern {
	p, err := ParsePattern(s)
	if err != nil {
		panic(err)
	}
	return p
}

// String is the pattern as written.
func (p Pattern) String() string { return p.raw }

// Normalized is the pattern as it is matched: "docker.io/library/busybox",
// "registry.local:5000/*".
func (p Pattern) Normalized() string { return p.norm }

// Match reports whether r's repository matches.
func (p Pattern) Match(r Reference) bool {
	if p.norm == "" {
		return false
	}
	return glob(p.norm, strings.ToLower(r.Name()))
}

// glob matches s against pattern, where "*" matches any run of
// characters; the classic greedy walk with one backtrack point, linear for
// a single "*" and O(len(pattern)*len(s)) at worst.
func glob(pattern, s string) bool {
	px, sx := 0, 0
	nextPx, nextSx := -1, -1
	for px < len(pattern) || sx < len(s) {
		if px < len(pattern) {
			if c := pattern[px]; c == '*' {
				nextPx, nextSx = px, sx+1
				px++
				continue
			} else if sx < len(s) && s[sx] == c {
				px++
				sx++
				continue
			}
		}
		if nextPx >= 0 && nextSx <= len(s) {
			px, sx = nextPx, nextSx
			continue
		}
		return false
	}
	return true
}
