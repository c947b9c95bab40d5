// Package registry owns how a device names and fetches images: parsing and
// normalising image references, the digest policy (images must be pinned to
// a digest unless tags are explicitly allowed), the registry hosts
// configuration (mirrors, plain HTTP for a local registry, TLS, credentials)
// turned into a containerd resolver, and Puller, which pulls and unpacks an
// image into a containerd namespace.
//
// Image trust plugs in through Verifier: Puller calls it with the resolved
// manifest descriptor after resolving and before anything is fetched or
// unpacked, so a refused image never reaches the snapshotter. Images already
// present and unpacked are not resolved again (and so not re-verified):
// verification guards what is new on the device.
package registry
