// Package image is the one image-reference grammar of Flotilla: the hub's
// admission (api/validation) and the agent's puller (registry) both parse
// references here, so a reference the hub admits is a reference the device
// reads the same way. It imports neither the containerd client nor any
// registry code, so the hub does not link them.
//
// # Grammar
//
// A reference is [HOST[:PORT]/]PATH[:TAG][@DIGEST], read with Docker's
// normalisation rules:
//
//   - the first path component is a registry host only when a "/" follows
//     it and it contains "." or ":", is "localhost", or has an upper-case
//     letter; otherwise the host is docker.io ("index.docker.io" is
//     docker.io too);
//   - a docker.io repository of one component is an official image:
//     "nginx" is docker.io/library/nginx;
//   - path components are lower-case letters and digits joined by ".",
//     "_", "__" or runs of "-", and the path is at most 255 characters
//     once normalised;
//   - a tag is at most 128 letters, digits, "_", "." and "-", not starting
//     with "." or "-";
//   - a digest is sha256, sha384 or sha512 with its lower-case hex
//     encoding of the algorithm's length; other algorithms are refused
//     because nothing on the device could check them;
//   - a bare 64-hex-digit string is an image ID, not a reference.
//
// These are the rules of github.com/distribution/reference's
// ParseNormalizedNamed (which FuzzParse checks this parser against), except
// that a first component that looks like a host but is not a valid one
// ("reg_istry.local/app") is refused instead of being read as a path
// without a host.
//
// Parse leaves the tag empty when none was written; Reference.Defaulted
// adds "latest" the way Docker and Kubernetes do for a pull.
//
// # Digest policy
//
// Policy says which references may name only a tag: by default every image
// must be pinned by a sha256 digest, so that every device runs exactly the
// bytes that were reviewed. Policy.AllowTags lists Patterns of repositories
// that are exempt ("registry.local:5000/*", "docker.io/library/busybox",
// or "*" for all). The hub and the agent read the same Policy from their
// configuration, and the errors say what to do.
//
// Errors are *Error values that wrap ErrInvalidReference or ErrNotPinned,
// so callers test them with errors.Is and show Reason to people.
package image
