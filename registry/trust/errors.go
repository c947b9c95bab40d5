package trust

import (
	"errors"
	"fmt"

	"github.com/opencontainers/go-digest"
)

// ErrImageSignature is wrapped by every refusal.
var ErrImageSignature = errors.New("image signature verification failed")

// WaitingReason is the container waiting reason for an error that wraps
// ErrImageSignature, as Kubernetes names it.
const WaitingReason = "ErrImageSignature"

// Why an image was refused; each *SignatureError wraps exactly one.
var (
	// ErrNoSignature: neither layout holds a signature of the image.
	ErrNoSignature = errors.New("no signature")
	// ErrUnknownKey: signatures exist, but none verifies with a trusted key.
	ErrUnknownKey = errors.New("signed by an unknown key")
	// ErrDigestMismatch: a trusted key signed a payload for another digest
	// (a signature copied from another image).
	ErrDigestMismatch = errors.New("signature payload is for another digest")
	// ErrRegistryUnreachable: the signatures could not be fetched and the
	// image was never verified under the current keys.
	ErrRegistryUnreachable = errors.New("registry unreachable and the image never verified")
	// ErrNoTrustedKey: the policy names keys for the image that the trust
	// directory does not hold.
	ErrNoTrustedKey = errors.New("no trusted key for the image")
)

// SignatureError is a refused image.
type SignatureError struct {
	// Image is the repository ("registry.local/app").
	Image string
	// Digest is the manifest or index digest that was checked.
	Digest digest.Digest
	// Reason is one of ErrNoSignature, ErrUnknownKey, ErrDigestMismatch,
	// ErrRegistryUnreachable, ErrNoTrustedKey.
	Reason error
	// Detail says what was found and what to do.
	Detail string
	// Err is the underlying failure, if any (a network error).
	Err error
}

func (e *SignatureError) Error() string {
	s := fmt.Sprintf("image %s@%s: %v", e.Image, e.Digest, e.Reason)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap lets errors.Is find ErrImageSignature, the Reason and Err.
func (e *SignatureError) Unwrap() []error {
	errs := []error{ErrImageSignature, e.Reason}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

func refuse(image string, d digest.Digest, reason error, err error, format string, args ...any) *SignatureError {
	return &SignatureError{Image: image, Digest: d, Reason: reason, Detail: fmt.Sprintf(format, args...), Err: err}
}
