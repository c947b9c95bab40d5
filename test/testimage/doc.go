// Package testimage builds OCI images from small Go programs inside tests and
// serves them from a local docker-registry, so that container tests never
// download anything.
//
// The common case is one call:
//
//	ref := testimage.App(t) // "127.0.0.1:PORT/testapp@sha256:..."
//
// which builds test/testapp, pushes it to a registry shared by the whole
// test process and returns its digest-pinned reference. Build does the same
// for any main package or source directory, with an image config of the
// caller's choosing; StartRegistry gives a test a private registry.
//
// Builds are cached per test process (same source, options and registry:
// one go build and one push), so many tests can call App cheaply. The shared
// registry keeps its blobs in memory and is killed by the kernel when the
// test process ends (PR_SET_PDEATHSIG), so nothing is left behind; private
// registries store into a test temp dir and stop at test cleanup.
package testimage
