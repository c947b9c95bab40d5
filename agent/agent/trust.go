package agent

import (
	"context"
	"fmt"
	"time"

	"flotilla.dev/flotilla/agent/localstore"
	"flotilla.dev/flotilla/registry/trust"
)

// DefaultTrustDir holds the cosign public keys images must be signed by.
const DefaultTrustDir = "/etc/flotilla/trust"

// verdicts keeps accepted signature verdicts in the local store, so that
// a verified image starts again after a reboot with its registry away.
type verdicts struct{ store *localstore.Store }

var _ trust.Cache = verdicts{}

const verdictPrefix = "trust-verdict/"

func (v verdicts) Lookup(key string) (string, bool) {
	name, err := v.store.Fact(verdictPrefix + key)
	return name, err == nil && name != ""
}

func (v verdicts) Remember(key, keyName string) error {
	return v.store.SetFact(verdictPrefix+key, keyName)
}

// newVerifier checks images against the trust dir's keys; with no key
// there it accepts every image, and it picks up keys added later.
func (a *Agent) newVerifier(store *localstore.Store) (*trust.Verifier, error) {
	var cache trust.Cache = trust.NewMemoryCache()
	if store != nil {
		cache = verdicts{store}
	}
	v, err := trust.New(trust.Config{Dir: a.cfg.TrustDir, Policy: a.cfg.TrustPolicy}, cache)
	if err != nil {
		return nil, fmt.Errorf("%w: image trust: %w", ErrConfig, err)
	}
	ks := v.KeySet()
	for _, e := range ks.Errors {
		a.log.Warn("a key in the trust dir cannot be used", "dir", a.cfg.TrustDir, "err", e)
	}
	if v.Enabled() {
		a.log.Info("images must be signed by a trusted key", "dir", a.cfg.TrustDir, "keys", len(ks.Keys))
	}
	return v, nil
}

// watchTrust reloads the keys when the trust dir changes; verdicts are
// keyed by the key set, so every image is checked again.
func (a *Agent) watchTrust(ctx context.Context, v *trust.Verifier) error {
	err := v.Watch(ctx, 30*time.Second,
		func(id string) { a.log.Info("the trusted keys changed; images are verified again", "keySet", id) },
		func(err error) { a.log.Warn("reading the trust dir", "dir", a.cfg.TrustDir, "err", err) })
	if ctx.Err() != nil {
		return nil
	}
	return err
}
