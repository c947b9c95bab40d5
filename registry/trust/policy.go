package trust

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"flotilla.dev/flotilla/api/image"
)

// ErrInvalidPolicy is wrapped by Config.Validate's errors.
var ErrInvalidPolicy = errors.New("invalid image trust policy")

// DefaultDir is where the agent looks for trusted keys by default.
const DefaultDir = "/etc/flotilla/trust"

// Config is the agent's image trust configuration (agent.yaml):
//
//	trust-dir: /etc/flotilla/trust
//	trust:
//	  policy:
//	  - images: registry.local:5000/team-a/*
//	    keys: [team-a.pub]
//	  - images: docker.io/library/busybox
//	    unverified: true
type Config struct {
	// Dir holds the trusted *.pub keys.
	Dir string `json:"trustDir,omitempty" mapstructure:"trust-dir"`
	// Policy rules, first match wins; without a match an image must be
	// signed by any key of Dir (when Dir holds none, nothing is checked).
	Policy []Rule `json:"policy,omitempty" mapstructure:"policy"`
}

// Rule says which keys may sign the images a pattern matches.
type Rule struct {
	// Images is an api/image Pattern ("registry.local:5000/*").
	Images string `json:"images" mapstructure:"images"`
	// Keys are file names in the trust directory ("release.pub"); any one
	// of them suffices.
	Keys []string `json:"keys,omitempty" mapstructure:"keys"`
	// Unverified runs the images without checking signatures; it must be
	// said explicitly, and excludes Keys.
	Unverified bool `json:"unverified,omitempty" mapstructure:"unverified"`
}

// Validate checks the rules: a valid pattern each, and either keys (plain
// file names ending in .pub) or unverified, not both.
func (c Config) Validate() error {
	var errs []error
	for i, r := range c.Policy {
		at := fmt.Sprintf("policy[%d]", i)
		if _, err := image.ParsePattern(r.Images); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s.images: %w", ErrInvalidPolicy, at, err))
		}
		switch {
		case r.Unverified && len(r.Keys) > 0:
			errs = append(errs, fmt.Errorf("%w: %s: keys and unverified exclude each other", ErrInvalidPolicy, at))
		case !r.Unverified && len(r.Keys) == 0:
			errs = append(errs, fmt.Errorf("%w: %s: name the keys that may sign %q, or say unverified: true", ErrInvalidPolicy, at, r.Images))
		}
		for j, k := range r.Keys {
			if k == "" || k != filepath.Base(k) || !strings.HasSuffix(k, KeyExt) || strings.HasPrefix(k, ".") {
				errs = append(errs, fmt.Errorf("%w: %s.keys[%d]: %q must be the name of a *%s file in the trust directory", ErrInvalidPolicy, at, j, k, KeyExt))
			}
		}
	}
	return errors.Join(errs...)
}

// rule is a validated Rule.
type rule struct {
	Rule
	pattern image.Pattern
	index   int
}

func (c Config) rules() []rule {
	out := make([]rule, 0, len(c.Policy))
	for i, r := range c.Policy {
		p, err := image.ParsePattern(r.Images)
		if err != nil {
			continue // Validate refuses such a config; never reached in a Verifier
		}
		out = append(out, rule{Rule: r, pattern: p, index: i})
	}
	return out
}
