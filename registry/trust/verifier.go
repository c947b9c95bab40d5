package trust

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"flotilla.dev/flotilla/registry"
)

// Verdict is the outcome of checking one image.
type Verdict struct {
	// Image is the repository, Digest what was checked.
	Image  string
	Digest digest.Digest
	// KeySetID is the key set and policy the verdict was reached under.
	KeySetID string
	// Verified is set when a signature by Key checked. With Err nil and
	// Verified false, the policy does not ask for a signature (Unverified
	// says why).
	Verified bool
	Key      string
	// Layout is LayoutSigTag or LayoutBundle for a signature just checked;
	// empty for a cached verdict.
	Layout string
	// Cached is set when the verdict came from the Cache, without the
	// registry.
	Cached bool
	// Unverified says why no signature was needed.
	Unverified string
	// Err is nil when the image may run, else a *SignatureError.
	Err error
}

// Verifier checks cosign signatures against the keys of a trust directory
// and a policy. It is safe for concurrent use; Reload swaps the key set
// atomically.
type Verifier struct {
	cfg   Config
	rules []rule
	cache Cache

	reloadMu sync.Mutex
	state    atomic.Pointer[state]
}

var _ registry.Verifier = (*Verifier)(nil)

type state struct {
	keys *KeySet
	id   string
}

// New checks cfg and loads the keys of cfg.Dir. cache may be nil: then
// every new image is verified against the registry. Key files that cannot
// be read are left out and reported by KeySet().Errors.
func New(cfg Config, cache Cache) (*Verifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v := &Verifier{cfg: cfg, rules: cfg.rules(), cache: cache}
	if _, err := v.Reload(); err != nil {
		return nil, err
	}
	return v, nil
}

// Reload re-reads the trust directory and reports whether KeySetID
// changed. On error the previous keys stay in force.
func (v *Verifier) Reload() (changed bool, err error) {
	v.reloadMu.Lock()
	defer v.reloadMu.Unlock()
	ks, err := LoadKeySet(v.cfg.Dir)
	if err != nil {
		return false, err
	}
	st := &state{keys: ks, id: v.keySetID(ks)}
	old := v.state.Swap(st)
	return old == nil || old.id != st.id, nil
}

// keySetID hashes the keys (name and fingerprint) and the policy.
func (v *Verifier) keySetID(ks *KeySet) string {
	h := sha256.New()
	fmt.Fprintf(h, "flotilla image trust v1\n")
	for _, n := range ks.Names() {
		fmt.Fprintf(h, "key %q %s\n", n, ks.Keys[n].ID)
	}
	for _, r := range v.rules {
		fmt.Fprintf(h, "rule %q unverified=%t keys=%q\n", r.pattern.Normalized(), r.Unverified, r.Keys)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// KeySetID fingerprints the trusted keys and the policy. A verdict reached
// under another ID does not apply: callers that keep verdicts key them by
// digest and KeySetID.
func (v *Verifier) KeySetID() string { return v.state.Load().id }

// KeySet is the keys in force.
func (v *Verifier) KeySet() *KeySet { return v.state.Load().keys }

// Enabled reports whether any image needs a signature: the directory
// holds a key, or a rule names keys.
func (v *Verifier) Enabled() bool {
	if len(v.state.Load().keys.Keys) > 0 {
		return true
	}
	for _, r := range v.rules {
		if !r.Unverified {
			return true
		}
	}
	return false
}

// Verify implements registry.Verifier: nil when the image may be pulled,
// else a *SignatureError.
func (v *Verifier) Verify(ctx context.Context, ref registry.Reference, target ocispec.Descriptor, resolver remotes.Resolver) error {
	return v.Check(ctx, ref, target, resolver).Err
}

// Check decides on one image: the policy's keys for it, then the cache,
// then the signatures in the registry.
func (v *Verifier) Check(ctx context.Context, ref registry.Reference, target ocispec.Descriptor, resolver remotes.Resolver) Verdict {
	st := v.state.Load()
	vd := Verdict{Image: ref.Name(), Digest: target.Digest, KeySetID: st.id}
	keys, why, err := v.keysFor(st, ref, target.Digest)
	if err != nil {
		vd.Err = err
		return vd
	}
	if keys == nil {
		vd.Unverified = why
		return vd
	}
	if err := target.Digest.Validate(); err != nil {
		vd.Err = refuse(vd.Image, target.Digest, ErrNoSignature, err, "the registry answered an invalid digest")
		return vd
	}
	cacheKey := CacheKey(st.id, vd.Image, target.Digest)
	if v.cache != nil {
		if k, ok := v.cache.Lookup(cacheKey); ok {
			vd.Verified, vd.Key, vd.Cached = true, k, true
			return vd
		}
	}
	v.checkRegistry(ctx, &vd, keys, ref, target.Digest, resolver)
	if vd.Err == nil && vd.Verified && v.cache != nil {
		// A verdict that cannot be stored is re-checked next time: the
		// image still runs now.
		_ = v.cache.Remember(cacheKey, vd.Key)
	}
	return vd
}

// keysFor returns the keys that may sign ref, nil with a reason when no
// signature is needed, or a refusal when the policy names absent keys.
func (v *Verifier) keysFor(st *state, ref registry.Reference, d digest.Digest) ([]*Key, string, error) {
	for _, r := range v.rules {
		if !r.pattern.Match(ref) {
			continue
		}
		if r.Unverified {
			return nil, fmt.Sprintf("policy[%d] (%s) says unverified", r.index, r.Images), nil
		}
		var keys []*Key
		for _, n := range r.Keys {
			if k, ok := st.keys.Keys[n]; ok {
				keys = append(keys, k)
			}
		}
		if len(keys) == 0 {
			return nil, "", refuse(ref.Name(), d, ErrNoTrustedKey, nil,
				"policy[%d] (%s) allows only the keys %s, and the trust directory %s holds none of them; add one of them there",
				r.index, r.Images, strings.Join(r.Keys, ", "), v.cfg.Dir)
		}
		return keys, "", nil
	}
	if len(st.keys.Keys) == 0 {
		return nil, fmt.Sprintf("the trust directory %q holds no key", v.cfg.Dir), nil
	}
	keys := make([]*Key, 0, len(st.keys.Keys))
	for _, n := range st.keys.Names() {
		keys = append(keys, st.keys.Keys[n])
	}
	return keys, "", nil
}

// checkRegistry fetches both layouts and judges what they hold.
func (v *Verifier) checkRegistry(ctx context.Context, vd *Verdict, keys []*Key, ref registry.Reference, d digest.Digest, resolver remotes.Resolver) {
	src, err := newSource(ctx, resolver, ref.Name(), d)
	if err != nil {
		vd.Err = refuse(vd.Image, d, ErrRegistryUnreachable, err, "cannot reach the registry for signatures")
		return
	}
	var fetchErrs []error
	cands, err := src.sigTag(ctx, d)
	if err != nil {
		fetchErrs = append(fetchErrs, err)
	}
	j := judge(keys, d, cands)
	if j.key == nil {
		// The referrers are read only when the .sig tag did not do: each
		// layout costs a few round trips, and most images have one.
		bundles, err := src.bundles(ctx, d)
		if err != nil {
			fetchErrs = append(fetchErrs, err)
		}
		j = judge(keys, d, append(cands, bundles...))
	}
	switch {
	case j.key != nil:
		vd.Verified, vd.Key, vd.Layout = true, j.key.Name, j.layout
	case len(j.otherDigests) > 0:
		vd.Err = refuse(vd.Image, d, ErrDigestMismatch, nil,
			"a trusted key (%s) signed %s, not this image (the signature was copied from another image, or the tag was re-pushed after signing); sign this digest",
			j.otherKey, digestList(j.otherDigests))
	case len(fetchErrs) > 0:
		vd.Err = refuse(vd.Image, d, ErrRegistryUnreachable, errors.Join(fetchErrs...), "could not read its signatures, and no verdict under the current keys is cached for it")
	case j.untrusted > 0:
		vd.Err = refuse(vd.Image, d, ErrUnknownKey, nil, "%s; trusted: %s", j.describe(), keyList(keys))
	case j.found > 0:
		vd.Err = refuse(vd.Image, d, ErrNoSignature, nil, "no usable image signature: %s", j.describe())
	default:
		vd.Err = refuse(vd.Image, d, ErrNoSignature, nil,
			"no cosign signature (tag %s in %s) and no sigstore bundle referring to it; sign it with cosign sign --key <key> %s@%s",
			tagFor(d, ".sig"), vd.Image, vd.Image, d)
	}
}

// judgement is what the candidates came to.
type judgement struct {
	key    *Key
	layout string
	// found counts signatures read; untrusted those no trusted key
	// verifies, keyless among them those with a certificate.
	found, untrusted, keyless int
	// otherDigests were signed by otherKey, a trusted key, for other images.
	otherDigests []digest.Digest
	otherKey     string
	// notes say why trusted-key signatures did not count.
	notes []string
}

// judge checks every candidate against keys: a signature counts when a
// trusted key verifies it and its signed payload names d.
func judge(keys []*Key, d digest.Digest, cands []candidate) judgement {
	var j judgement
	for _, c := range cands {
		j.found++
		if c.bad != nil {
			j.notes = append(j.notes, fmt.Sprintf("%s unreadable: %v", c.where, c.bad))
			continue
		}
		switch c.layout {
		case LayoutSigTag:
			k := firstKey(keys, "", func(k *Key) bool { return verifyWith(k.legacy, c.sig, c.payload) })
			if k == nil {
				j.untrusted++
				continue
			}
			p, err := ParsePayload(c.payload)
			if err != nil {
				j.notes = append(j.notes, fmt.Sprintf("%s: signed by %s but %v", c.where, k.Name, err))
				continue
			}
			if p.Digest != d {
				j.otherDigests, j.otherKey = append(j.otherDigests, p.Digest), k.Name
				continue
			}
			j.key, j.layout = k, c.layout
			return j
		case LayoutBundle:
			env := c.env
			if env.Keyless {
				j.keyless++
				j.untrusted++
				continue
			}
			if env.PayloadType != PayloadTypeInToto {
				j.notes = append(j.notes, fmt.Sprintf("%s: payload type %q is not an in-toto statement", c.where, env.PayloadType))
				continue
			}
			pae := PAE(env.PayloadType, env.Payload)
			k := firstKey(keys, env.Hint, func(k *Key) bool {
				for _, sig := range env.Signatures {
					if verifyWith(k.dsse, sig, pae) {
						return true
					}
				}
				return false
			})
			if k == nil {
				j.untrusted++
				continue
			}
			st, err := ParseStatement(env.Payload)
			if err != nil {
				j.notes = append(j.notes, fmt.Sprintf("%s: signed by %s but %v", c.where, k.Name, err))
				continue
			}
			if st.PredicateType != PredicateTypeSign {
				j.notes = append(j.notes, fmt.Sprintf("%s: signed by %s, but an attestation (%s), not an image signature", c.where, k.Name, st.PredicateType))
				continue
			}
			if !containsDigest(st.Subjects, d) {
				j.otherDigests, j.otherKey = append(j.otherDigests, st.Subjects...), k.Name
				continue
			}
			j.key, j.layout = k, c.layout
			return j
		}
	}
	return j
}

// firstKey tries the key whose hint matches first: the hint is unsigned,
// so it only saves work and never decides.
func firstKey(keys []*Key, hint string, ok func(*Key) bool) *Key {
	if hint != "" {
		for _, k := range keys {
			if k.hint == hint && ok(k) {
				return k
			}
		}
	}
	for _, k := range keys {
		if (hint == "" || k.hint != hint) && ok(k) {
			return k
		}
	}
	return nil
}

func (j judgement) describe() string {
	var parts []string
	if n := j.untrusted - j.keyless; n > 0 {
		parts = append(parts, fmt.Sprintf("%d signature(s) found, none by a trusted key", n))
	}
	if j.keyless > 0 {
		parts = append(parts, fmt.Sprintf("%d keyless signature(s) (Fulcio certificates), which a device cannot check offline", j.keyless))
	}
	parts = append(parts, j.notes...)
	return strings.Join(parts, "; ")
}

func containsDigest(ds []digest.Digest, d digest.Digest) bool {
	for _, x := range ds {
		if x == d {
			return true
		}
	}
	return false
}

func digestList(ds []digest.Digest) string {
	seen := map[digest.Digest]bool{}
	var out []string
	for _, d := range ds {
		if !seen[d] {
			seen[d] = true
			out = append(out, d.String())
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func keyList(keys []*Key) string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprintf("%s (%s, sha256:%s)", k.Name, k.Algorithm, k.ID[:12])
	}
	return strings.Join(out, ", ")
}
