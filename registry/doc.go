// Package registry owns how a device names and fetches images: image
// references and the digest policy (images must be pinned to a digest
// unless tags are allowed for their repository), both api/image's so that
// the device reads references exactly as the hub's admission did; the
// registry hosts configuration (mirrors tried in order, plain HTTP for a
// local registry, CA files, credentials inline or from a file) turned into
// a containerd resolver; Keychain, the credentials of a pod's image pull
// secrets (Docker config JSON), which one pull tries before the
// configuration's; and Puller, which pulls and unpacks an image into a
// containerd namespace.
//
// Image trust plugs in through Verifier (registry/trust implements it with
// cosign signatures): Puller calls it with the resolved manifest descriptor
// after resolving and before anything is fetched or unpacked, so a refused
// image never reaches the content store or the snapshotter. Images already
// present and unpacked are not resolved again by Pull; Reverify runs the
// Verifier on them, which with a verdict cache is a lookup that works
// offline until the trusted keys change.
package registry
