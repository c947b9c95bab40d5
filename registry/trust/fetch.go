package trust

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sirupsen/logrus"
)

// Bounds on what a registry can make a device read and check: a
// signature manifest with more layers than this, or more referrers, is
// read only up to the bound (cosign appends one layer per signing).
const (
	maxManifest   = 4 << 20
	maxSignatures = 64
	maxReferrers  = 64
)

// Layouts a signature was found in, as Verdict.Layout reports them.
const (
	LayoutSigTag = "cosign .sig tag"
	LayoutBundle = "sigstore bundle referrer"
)

// candidate is one signature found in the registry, not yet checked.
type candidate struct {
	layout string
	// where names it for messages: "tag sha256-….sig layer 0".
	where string
	// legacy: the payload and its signature.
	payload, sig []byte
	// bundle: the envelope.
	env *Envelope
	// bad is set when the signature could not be read at all.
	bad error
}

// source fetches signatures of one repository through the pull's resolver.
type source struct {
	resolver remotes.Resolver
	fetcher  remotes.Fetcher
	repo     string
}

// quiet raises containerd's logger in ctx to warnings: a tag that does not
// exist is the common answer here (an image signed in one layout only),
// and containerd logs every 404 at info.
func quiet(ctx context.Context) context.Context {
	cur := log.G(ctx)
	if cur.Logger == nil || !cur.Logger.IsLevelEnabled(logrus.InfoLevel) {
		return ctx
	}
	l := &logrus.Logger{
		Out: cur.Logger.Out, Hooks: cur.Logger.Hooks, Formatter: cur.Logger.Formatter,
		ReportCaller: cur.Logger.ReportCaller, Level: logrus.WarnLevel, ExitFunc: cur.Logger.ExitFunc,
	}
	return log.WithLogger(ctx, logrus.NewEntry(l).WithFields(cur.Data))
}

func newSource(ctx context.Context, resolver remotes.Resolver, repo string, target digest.Digest) (*source, error) {
	f, err := resolver.Fetcher(ctx, repo+"@"+target.String())
	if err != nil {
		return nil, err
	}
	return &source{resolver: resolver, fetcher: f, repo: repo}, nil
}

// tagFor is cosign's tag scheme: "sha256:abc" → "sha256-abc" + suffix.
func tagFor(d digest.Digest, suffix string) string {
	return d.Algorithm().String() + "-" + d.Encoded() + suffix
}

// sigTag reads the cosign v2 signature manifest. A missing tag is no
// signature, not an error.
func (s *source) sigTag(ctx context.Context, target digest.Digest) ([]candidate, error) {
	tag := tagFor(target, ".sig")
	_, desc, err := s.resolver.Resolve(quiet(ctx), s.repo+":"+tag)
	if errdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resolve %s:%s: %w", s.repo, tag, err)
	}
	var m ocispec.Manifest
	if err := s.fetchJSON(ctx, desc, maxManifest, &m); err != nil {
		return nil, fmt.Errorf("signature manifest %s:%s: %w", s.repo, tag, err)
	}
	var out []candidate
	for i, l := range m.Layers {
		if len(out) == maxSignatures {
			break
		}
		if l.MediaType != MediaTypeSimpleSigning {
			continue
		}
		c := candidate{layout: LayoutSigTag, where: fmt.Sprintf("tag %s layer %d", tag, i)}
		sig, derr := decodeBase64(l.Annotations[AnnotationSignature])
		if derr != nil || len(sig) == 0 {
			c.bad = fmt.Errorf("annotation %s is missing or not base64", AnnotationSignature)
			out = append(out, c)
			continue
		}
		c.sig = sig
		if l.Size > maxPayload {
			c.bad = fmt.Errorf("payload of %d bytes is larger than %d", l.Size, maxPayload)
			out = append(out, c)
			continue
		}
		c.payload, err = s.fetch(ctx, l, maxPayload)
		if err != nil {
			return nil, fmt.Errorf("signature payload %s: %w", l.Digest, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// bundles reads sigstore bundles that refer to target: through the OCI
// 1.1 referrers API where the registry has it, else through the
// "sha256-<hex>" fallback tag, which is resolved here across every host
// (containerd's own fallback stops at the first host without the tag, a
// mirror).
func (s *source) bundles(ctx context.Context, target digest.Digest) ([]candidate, error) {
	var refs []ocispec.Descriptor
	var apiErr error
	if rf, ok := s.fetcher.(remotes.ReferrersFetcher); ok {
		refs, apiErr = rf.FetchReferrers(quiet(ctx), target)
	}
	if len(refs) == 0 {
		tag := tagFor(target, "")
		_, desc, err := s.resolver.Resolve(quiet(ctx), s.repo+":"+tag)
		switch {
		case errdefs.IsNotFound(err):
			if apiErr != nil && !errdefs.IsNotFound(apiErr) {
				return nil, fmt.Errorf("referrers of %s: %w", target, apiErr)
			}
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("resolve %s:%s: %w", s.repo, tag, err)
		}
		var idx ocispec.Index
		if err := s.fetchJSON(ctx, desc, maxManifest, &idx); err != nil {
			return nil, fmt.Errorf("referrers index %s:%s: %w", s.repo, tag, err)
		}
		refs = idx.Manifests
	}
	var out []candidate
	seen := map[digest.Digest]bool{}
	for _, r := range refs {
		if len(seen) == maxReferrers {
			break
		}
		// The artifact type in an index is a hint at best (cosign's
		// fallback index records the empty config's type), so every
		// manifest is read and judged by what it holds.
		if seen[r.Digest] || !isManifest(r.MediaType) || (r.ArtifactType != "" && r.ArtifactType != MediaTypeBundle && r.ArtifactType != ocispec.MediaTypeEmptyJSON) {
			continue
		}
		seen[r.Digest] = true
		var m ocispec.Manifest
		if err := s.fetchJSON(ctx, r, maxManifest, &m); err != nil {
			return nil, fmt.Errorf("referrer %s: %w", r.Digest, err)
		}
		for i, l := range m.Layers {
			if l.MediaType != MediaTypeBundle {
				continue
			}
			c := candidate{layout: LayoutBundle, where: fmt.Sprintf("referrer %s layer %d", r.Digest, i)}
			if l.Size > maxPayload {
				c.bad = fmt.Errorf("bundle of %d bytes is larger than %d", l.Size, maxPayload)
				out = append(out, c)
				continue
			}
			b, err := s.fetch(ctx, l, maxPayload)
			if err != nil {
				return nil, fmt.Errorf("bundle %s: %w", l.Digest, err)
			}
			env, err := ParseBundle(b)
			if err != nil {
				c.bad = err
			} else {
				c.env = &env
			}
			out = append(out, c)
		}
	}
	return out, nil
}

func isManifest(mt string) bool {
	return mt == ocispec.MediaTypeImageManifest || mt == "application/vnd.docker.distribution.manifest.v2+json"
}

// fetch reads desc whole, at most limit bytes, and checks its digest:
// containerd's fetcher leaves that to its content store, which this path
// does not use.
func (s *source) fetch(ctx context.Context, desc ocispec.Descriptor, limit int64) ([]byte, error) {
	if desc.Size > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than %d", desc.Digest, desc.Size, limit)
	}
	rc, err := s.fetcher.Fetch(ctx, desc)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is more than %d bytes", desc.Digest, limit)
	}
	if desc.Size > 0 && int64(len(b)) != desc.Size {
		return nil, fmt.Errorf("%w: %s: read %d bytes, descriptor says %d", errContent, desc.Digest, len(b), desc.Size)
	}
	if err := desc.Digest.Validate(); err != nil || desc.Digest.Algorithm().FromBytes(b) != desc.Digest {
		return nil, fmt.Errorf("%w: %s: content does not match its digest", errContent, desc.Digest)
	}
	return b, nil
}

// errContent marks content the registry served wrong: not the network.
var errContent = errors.New("registry served bad content")

func (s *source) fetchJSON(ctx context.Context, desc ocispec.Descriptor, limit int64, v any) error {
	b, err := s.fetch(ctx, desc, limit)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %s: %v", errContent, desc.Digest, err)
	}
	return nil
}

// shortDigest is for messages: "sha256:0123456789ab".
func shortDigest(d digest.Digest) string {
	s := d.String()
	if i := strings.IndexByte(s, ':'); i >= 0 && len(s) > i+13 {
		return s[:i+13]
	}
	return s
}
