// Command kubectl is the kubectl the tests run: k8s.io/kubectl's own
// command, built from the module at the version go.mod pins, which is the
// Kubernetes minor of the client-go the hub is written against (v0.37.2 is
// kubectl v1.37.2). The kubectl tests (hub/apiserver, hub/apiserver/openapi)
// get it from internal/testbin.Kubectl, and `make test` builds it once into
// bin/test/kubectl, so those tests never depend on which kubectl, if any,
// the machine has: Debian's is 1.20, too old for `explain --output` and
// for leaving field validation to the server.
//
// It is a test tool: no package Flotilla ships contains it, and the
// binaries the hub and the agents run do not link k8s.io/kubectl.
package main
