// Package trust verifies, on the device and offline, that an image was
// signed by a trusted key with the cosign CLI, before the puller fetches or
// unpacks anything of it.
//
// # What is checked
//
// Verifier implements registry.Verifier. Given the repository and the
// manifest (or index) digest the reference resolved to, it looks for two
// layouts, through the same containerd resolver the pull uses (so mirrors,
// plain HTTP, CA files and credentials apply):
//
//   - cosign v2: the tag "sha256-<hex>.sig" in the same repository, an OCI
//     manifest whose layers are simple-signing payloads
//     (application/vnd.dev.cosign.simplesigning.v1+json), each signed in
//     its "dev.cosignproject.cosign/signature" annotation (base64). The
//     payload's critical.type must be "cosign container image signature"
//     and critical.image.docker-manifest-digest the image's digest.
//   - cosign v3 (and v2 with --new-bundle-format): OCI 1.1 referrers of the
//     image digest, found through the referrers API or the "sha256-<hex>"
//     fallback tag, whose layer is a sigstore bundle
//     (application/vnd.dev.sigstore.bundle.v0.3+json) holding a DSSE
//     envelope over an in-toto statement whose predicateType is
//     "https://sigstore.dev/cosign/sign/v1" and whose subject is the
//     image's digest. Attestations (other predicate types) are not
//     signatures and do not count.
//
// The critical.identity.docker-reference of a payload is not compared with
// the repository, as cosign does not by default: an image copied to
// another repository keeps its signature. Only the digest binds.
//
// No transparency log and no Fulcio certificate is consulted: devices are
// offline. Trust comes only from public keys in the trust directory;
// keyless signatures (a certificate in place of a key) are never trusted.
//
// # Keys and policy
//
// The trust directory holds "*.pub" files as cosign writes them (PEM
// "PUBLIC KEY": ECDSA P-256 from cosign generate-key-pair, and Ed25519 or
// RSA keys from cosign import-key-pair). Policy rules map image Patterns
// (api/image) to key file names, or mark images explicitly unverified;
// the first rule that matches decides. Without a matching rule, an image
// must be signed by any key of the directory, and when the directory holds
// no key, verification is off.
//
// KeySetID fingerprints the keys and the rules together: a verdict is
// valid only for the KeySetID it was reached under. Reload (or Watch)
// re-reads the directory; when the ID changes, cached verdicts stop
// applying and images are verified again.
//
// # Verdicts and errors
//
// Refusals are *SignatureError values that wrap ErrImageSignature and one
// of ErrNoSignature, ErrUnknownKey, ErrDigestMismatch,
// ErrRegistryUnreachable or ErrNoTrustedKey, so a caller maps them with
// errors.Is (the kubelet to the waiting reason "ErrImageSignature"); their
// messages name the image, the digest and why. A Cache remembers accepted
// verdicts per repository, digest and KeySetID, so a verified image starts
// again with its registry gone.
package trust
