package registry

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/v2/pkg/namespaces"
)

// Reverify runs the Verifier again on an image that is already present,
// through the puller's resolver (mirrors and credentials included). Pull
// does not verify present images, so the kubelet calls this before it
// starts a container from one: with a Verifier that caches verdicts per
// digest and key set (registry/trust) it costs a lookup, works with the
// registry gone, and checks the registry again only when the trusted keys
// or the policy changed. Without a Verifier it returns nil.
func (p *Puller) Reverify(ctx context.Context, pulled Pulled, opts ...PullOption) error {
	if p.cfg.Verifier == nil || pulled.Image == nil {
		return nil
	}
	resolver := p.resolverFor(ApplyPullOptions(opts...).Keychain)
	ctx = namespaces.WithNamespace(ctx, p.cfg.Namespace)
	if err := p.cfg.Verifier.Verify(ctx, pulled.Ref, pulled.Image.Target(), resolver); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUntrusted, pulled.Ref, err)
	}
	return nil
}
