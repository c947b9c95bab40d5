package kubelettest

import (
	"context"
	"sort"
	"sync"

	"github.com/opencontainers/go-digest"

	"flotilla.dev/flotilla/agent/kubelet"
	"flotilla.dev/flotilla/registry"
)

var _ kubelet.Images = (*Images)(nil)

// ImageSize is the Size of every image the fake pulls.
const ImageSize = 1 << 20

// Images is an in-memory kubelet.Images: a set of present images, keyed
// by normalised reference (registry.Reference.PullName), that Pull adds
// to. Pulled images have no containerd Image, so Pulled.Name is the
// reference's PullName; their digest is the reference's, or one derived
// from the reference when it has only a tag.
type Images struct {
	faults

	mu       sync.Mutex
	present  map[string]registry.Pulled
	pullErrs map[string]error
	pulls    map[string]int
	// untrusted holds the images whose signature does not verify.
	untrusted map[string]error
	// keychains holds the credentials of the last pull of each image.
	keychains map[string]registry.Keychain
}

// NewImages returns a fake with the images present.
func NewImages(present ...string) *Images {
	im := &Images{present: map[string]registry.Pulled{}, pullErrs: map[string]error{}, pulls: map[string]int{}, untrusted: map[string]error{}, keychains: map[string]registry.Keychain{}}
	for _, image := range present {
		if err := im.Add(image); err != nil {
			panic(err)
		}
	}
	return im
}

// Present answers from the set of present images.
func (im *Images) Present(_ context.Context, ref registry.Reference) (registry.Pulled, bool, error) {
	if err := im.enter("Present"); err != nil {
		return registry.Pulled{}, false, err
	}
	im.mu.Lock()
	defer im.mu.Unlock()
	p, ok := im.present[ref.PullName()]
	if !ok {
		return registry.Pulled{}, false, nil
	}
	p.Fetched = false
	return p, true, nil
}

// Pull makes the image present, or fails with the injected error
// (FailNext, FailAlways, SetPullError). An unparsable reference fails
// with registry.ErrInvalidReference, as the real puller does.
func (im *Images) Pull(_ context.Context, image string, opts ...registry.PullOption) (registry.Pulled, error) {
	if err := im.enter("Pull"); err != nil {
		return registry.Pulled{}, err
	}
	ref, err := registry.ParseReference(image)
	if err != nil {
		return registry.Pulled{}, err
	}
	key := ref.PullName()
	im.mu.Lock()
	defer im.mu.Unlock()
	im.pulls[key]++
	im.keychains[key] = nil
	if keys := registry.ApplyPullOptions(opts...).Keychain; keys != nil {
		im.keychains[key] = keys()
	}
	if err := im.untrusted[key]; err != nil {
		return registry.Pulled{}, err
	}
	if err := im.pullErrs[key]; err != nil {
		return registry.Pulled{}, err
	}
	if p, ok := im.present[key]; ok {
		p.Fetched = false
		return p, nil
	}
	p := pulled(ref)
	im.present[key] = p
	p.Fetched = true
	return p, nil
}

// Reverify fails with the error SetUntrusted gave the image.
func (im *Images) Reverify(_ context.Context, p registry.Pulled, _ ...registry.PullOption) error {
	if err := im.enter("Reverify"); err != nil {
		return err
	}
	im.mu.Lock()
	defer im.mu.Unlock()
	return im.untrusted[p.Ref.PullName()]
}

// SetUntrusted makes the image's signature fail to verify with err (nil:
// verify again), whether it is present or pulled.
func (im *Images) SetUntrusted(image string, err error) {
	im.mu.Lock()
	defer im.mu.Unlock()
	if err == nil {
		delete(im.untrusted, imageKey(image))
		return
	}
	im.untrusted[imageKey(image)] = err
}

// Add makes images present without a pull.
func (im *Images) Add(images ...string) error {
	im.mu.Lock()
	defer im.mu.Unlock()
	for _, image := range images {
		ref, err := registry.ParseReference(image)
		if err != nil {
			return err
		}
		im.present[ref.PullName()] = pulled(ref)
	}
	return nil
}

// Remove makes an image absent (as after image garbage collection).
func (im *Images) Remove(image string) {
	im.mu.Lock()
	defer im.mu.Unlock()
	delete(im.present, imageKey(image))
}

// Has reports whether the image is present; an image's containerd name
// (Pulled.Name) and its reference both work.
func (im *Images) Has(image string) bool {
	im.mu.Lock()
	defer im.mu.Unlock()
	_, ok := im.present[imageKey(image)]
	return ok
}

// List returns the present images' normalised references, sorted.
func (im *Images) List() []string {
	im.mu.Lock()
	defer im.mu.Unlock()
	out := make([]string, 0, len(im.present))
	for k := range im.present {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// SetPullError makes every Pull of the image fail with err (one wrapping
// registry.ErrImageNotFound, say) until it is set to nil.
func (im *Images) SetPullError(image string, err error) {
	im.mu.Lock()
	defer im.mu.Unlock()
	if err == nil {
		delete(im.pullErrs, imageKey(image))
		return
	}
	im.pullErrs[imageKey(image)] = err
}

// Keychain returns the credentials the last pull of image was given.
func (im *Images) Keychain(image string) registry.Keychain {
	im.mu.Lock()
	defer im.mu.Unlock()
	return im.keychains[imageKey(image)]
}

// Pulls is how many times Pull was asked for the image (after injected
// FailNext and FailAlways errors, which are not counted here).
func (im *Images) Pulls(image string) int {
	im.mu.Lock()
	defer im.mu.Unlock()
	return im.pulls[imageKey(image)]
}

func pulled(ref registry.Reference) registry.Pulled {
	d := ref.Digest
	if d == "" {
		d = digest.FromString(ref.PullName())
	}
	return registry.Pulled{Ref: ref, Digest: d, Size: ImageSize}
}
