// Command push-image builds a Go program into a single-layer OCI image and
// pushes it to a registry, printing the digest-pinned reference. make demo
// uses it for the demo application; tests use the testimage package directly.
package main
