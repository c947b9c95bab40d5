package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

var (
	// ErrImageNotFound is returned when the registry does not have the image.
	ErrImageNotFound = errors.New("image not found in the registry")
	// ErrUntrusted is returned when the Verifier refuses an image.
	ErrUntrusted = errors.New("image refused by the trust policy")
)

// DefaultSnapshotter is the snapshotter images are unpacked into.
const DefaultSnapshotter = "overlayfs"

// Verifier decides whether an image may be unpacked on this device. Puller
// calls it once per new image, after resolving the reference to its
// manifest (or index) descriptor and before fetching layers; the resolver
// lets it fetch what it needs (for cosign, the signature manifest).
type Verifier interface {
	Verify(ctx context.Context, ref Reference, target ocispec.Descriptor, resolver remotes.Resolver) error
}

// PullerConfig configures a Puller.
type PullerConfig struct {
	// Namespace is the containerd namespace images live in (required).
	Namespace string
	// Registries says how to reach registries.
	Registries Config
	// Policy is the digest policy; the zero value requires digests.
	Policy Policy
	// Snapshotter defaults to DefaultSnapshotter.
	Snapshotter string
	// Platform like "linux/arm64"; defaults to the host's.
	Platform string
	// Verifier, when set, must accept every image before it is unpacked.
	Verifier Verifier
}

// Puller pulls and unpacks images into one containerd namespace.
type Puller struct {
	client   *containerd.Client
	cfg      PullerConfig
	hosts    docker.RegistryHosts
	resolver remotes.Resolver
	platform platforms.MatchComparer

	mu       sync.Mutex
	inflight map[string]*pullCall
}

type pullCall struct {
	done chan struct{}
	res  Pulled
	err  error
}

// Pulled is the outcome of a pull.
type Pulled struct {
	Ref   Reference
	Image containerd.Image
	// Digest is the digest the reference resolved to (manifest or index):
	// the image ID a pod status reports.
	Digest digest.Digest
	// Fetched is false when the image was already present and unpacked.
	Fetched bool
	// Size is the image's content size in bytes.
	Size int64
}

// Name is the name the image is stored under in containerd, which
// containers are created from.
func (p Pulled) Name() string {
	if p.Image != nil {
		return p.Image.Name()
	}
	return p.Ref.PullName()
}

// NewPuller checks the configuration and returns a Puller.
func NewPuller(client *containerd.Client, cfg PullerConfig) (*Puller, error) {
	if cfg.Namespace == "" {
		return nil, fmt.Errorf("%w: the containerd namespace is empty", ErrInvalidConfig)
	}
	if err := cfg.Registries.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if cfg.Snapshotter == "" {
		cfg.Snapshotter = DefaultSnapshotter
	}
	p := &Puller{client: client, cfg: cfg, hosts: cfg.Registries.RegistryHosts(), inflight: map[string]*pullCall{}}
	p.resolver = docker.NewResolver(docker.ResolverOptions{Hosts: p.hosts})
	if cfg.Platform != "" {
		pl, err := platforms.Parse(cfg.Platform)
		if err != nil {
			return nil, fmt.Errorf("%w: platform %q: %v", ErrInvalidConfig, cfg.Platform, err)
		}
		p.platform = platforms.Only(pl)
	} else {
		p.platform = platforms.Default()
	}
	return p, nil
}

// PullOption adjusts one pull.
type PullOption func(*PullOptions)

// PullOptions is what the options of one pull add up to.
type PullOptions struct {
	// Keychain returns credentials tried before the registries
	// configuration's. Reverify calls it only when a registry asks for
	// credentials (a cached verdict asks none), Pull once.
	Keychain func() Keychain
}

// ApplyPullOptions adds opts up (for other implementations of pulling,
// such as fakes).
func ApplyPullOptions(opts ...PullOption) PullOptions {
	var o PullOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithKeychain gives the pull credentials (a pod's image pull secrets).
func WithKeychain(keys Keychain) PullOption {
	return func(o *PullOptions) { o.Keychain = func() Keychain { return keys } }
}

// WithKeychainFunc gives the pull credentials read only when needed.
func WithKeychainFunc(fn func() Keychain) PullOption {
	return func(o *PullOptions) { o.Keychain = sync.OnceValue(fn) }
}

// resolverFor returns the resolver for a pull with keys.
func (p *Puller) resolverFor(keys func() Keychain) remotes.Resolver {
	if keys == nil {
		return p.resolver
	}
	return docker.NewResolver(docker.ResolverOptions{Hosts: p.cfg.Registries.withKeychain(p.hosts, keys)})
}

// Pull makes the image present and unpacked. Concurrent pulls of one
// reference with the same credentials share the work.
func (p *Puller) Pull(ctx context.Context, image string, opts ...PullOption) (Pulled, error) {
	ref, err := p.cfg.Policy.Parse(image)
	if err != nil {
		return Pulled{}, err
	}
	key, keys := ref.String(), ApplyPullOptions(opts...).Keychain
	if keys != nil {
		got := keys()
		keys = func() Keychain { return got }
		key += " " + got.fingerprint()
	}
	resolver := p.resolverFor(keys)
	p.mu.Lock()
	if c, ok := p.inflight[key]; ok {
		p.mu.Unlock()
		select {
		case <-c.done:
			return c.res, c.err
		case <-ctx.Done():
			return Pulled{}, ctx.Err()
		}
	}
	c := &pullCall{done: make(chan struct{})}
	p.inflight[key] = c
	p.mu.Unlock()

	c.res, c.err = p.pull(ctx, ref, resolver)
	p.mu.Lock()
	delete(p.inflight, key)
	p.mu.Unlock()
	close(c.done)
	return c.res, c.err
}

// Present returns the image when it is already present and unpacked.
func (p *Puller) Present(ctx context.Context, ref Reference) (Pulled, bool, error) {
	ctx = namespaces.WithNamespace(ctx, p.cfg.Namespace)
	img, err := p.client.GetImage(ctx, ref.PullName())
	if errdefs.IsNotFound(err) {
		return Pulled{}, false, nil
	}
	if err != nil {
		return Pulled{}, false, fmt.Errorf("look up image %s: %w", ref, err)
	}
	ok, err := img.IsUnpacked(ctx, p.cfg.Snapshotter)
	if err != nil || !ok {
		return Pulled{}, false, err
	}
	size, _ := img.Size(ctx)
	return Pulled{Ref: ref, Image: img, Digest: img.Target().Digest, Size: size}, true, nil
}

func (p *Puller) pull(ctx context.Context, ref Reference, resolver remotes.Resolver) (Pulled, error) {
	if got, ok, err := p.Present(ctx, ref); err != nil || ok {
		return got, err
	}
	ctx = namespaces.WithNamespace(ctx, p.cfg.Namespace)
	_, desc, err := resolver.Resolve(ctx, ref.PullName())
	if err != nil {
		if errdefs.IsNotFound(err) {
			return Pulled{}, fmt.Errorf("%w: %s: %v", ErrImageNotFound, ref, err)
		}
		return Pulled{}, fmt.Errorf("resolve %s: %w", ref, err)
	}
	if ref.Pinned() && desc.Digest != ref.Digest {
		return Pulled{}, fmt.Errorf("resolve %s: registry answered digest %s", ref, desc.Digest)
	}
	if p.cfg.Verifier != nil {
		if err := p.cfg.Verifier.Verify(ctx, ref, desc, resolver); err != nil {
			return Pulled{}, fmt.Errorf("%w: %s: %w", ErrUntrusted, ref, err)
		}
	}
	ctx, done, err := p.pullLease(ctx, desc)
	if err != nil {
		return Pulled{}, err
	}
	// Pull what was verified: by digest, even when the reference is a tag
	// that may have moved since.
	byDigest := ref.Name() + "@" + desc.Digest.String()
	img, err := p.client.Pull(ctx, byDigest,
		containerd.WithResolver(resolver),
		containerd.WithPullUnpack,
		containerd.WithPullSnapshotter(p.cfg.Snapshotter),
		containerd.WithPlatformMatcher(p.platform),
	)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return Pulled{}, fmt.Errorf("%w: %s: %v", ErrImageNotFound, ref, err)
		}
		return Pulled{}, fmt.Errorf("pull %s: %w", ref, err)
	}
	done(ctx)
	if !ref.Pinned() {
		if err := p.tag(ctx, ref.PullName(), img.Target()); err != nil {
			return Pulled{}, err
		}
		img, err = p.client.GetImage(ctx, ref.PullName())
		if err != nil {
			return Pulled{}, fmt.Errorf("look up image %s after pull: %w", ref, err)
		}
	}
	size, _ := img.Size(ctx)
	return Pulled{Ref: ref, Image: img, Digest: desc.Digest, Fetched: true, Size: size}, nil
}

// pullLeaseExpiry bounds how long the bytes of an interrupted pull are
// kept for the next attempt to resume from.
const pullLeaseExpiry = 24 * time.Hour

// pullLease returns ctx under a lease named for the image, which holds
// what a pull has fetched, partial layers included: an interrupted pull
// (a dropped link, an agent restart) resumes from the bytes already on
// the device instead of starting over, since containerd's garbage
// collector keeps what a lease holds. done releases the lease once the
// image record holds the content; a failed pull leaves it to its expiry.
func (p *Puller) pullLease(ctx context.Context, target ocispec.Descriptor) (context.Context, func(context.Context), error) {
	// Lease IDs are at most 76 characters; 48 hex digits name an image.
	id := "flotilla-pull-" + target.Digest.Encoded()
	if len(id) > 62 {
		id = id[:62]
	}
	ls := p.client.LeasesService()
	l, err := ls.Create(ctx, leases.WithID(id), leases.WithExpiration(pullLeaseExpiry),
		leases.WithLabel("flotilla.dev/image", target.Digest.String()))
	if errdefs.IsAlreadyExists(err) {
		l, err = leases.Lease{ID: id}, nil
	}
	if err != nil {
		return ctx, nil, fmt.Errorf("pull lease for %s: %w", target.Digest, err)
	}
	done := func(ctx context.Context) {
		// Best effort: the lease expires anyway.
		_ = ls.Delete(context.WithoutCancel(ctx), l)
	}
	return leases.WithLease(ctx, id), done, nil
}

// tag records a tag reference as an image pointing at what was pulled.
func (p *Puller) tag(ctx context.Context, name string, target ocispec.Descriptor) error {
	is := p.client.ImageService()
	img := images.Image{Name: name, Target: target}
	if _, err := is.Create(ctx, img); err != nil {
		if !errdefs.IsAlreadyExists(err) {
			return fmt.Errorf("record image %s: %w", name, err)
		}
		if _, err := is.Update(ctx, img, "target"); err != nil {
			return fmt.Errorf("update image %s: %w", name, err)
		}
	}
	return nil
}
