// Package buildtags names the build tags Flotilla's binaries are built
// with, for the Go code that builds them (internal/testbin, the bench
// and the packaging tests) to build what ships. The Makefile,
// packaging/build.sh and .goreleaser.yaml spell them out; this package's
// test checks that they agree.
package buildtags

// Tags is the value of go build's -tags.
//
// grpcnotrace leaves golang.org/x/net/trace out of gRPC (the containerd
// client's transport). Its debug pages execute html/template, and a
// reachable template execution makes the linker keep every exported
// method of every type, since any might be called by reflection: built
// without the tag the agent is 52 MB instead of 40, and its resident
// pages grow with it. Nothing in Flotilla serves gRPC's /debug/requests.
const Tags = "grpcnotrace"
