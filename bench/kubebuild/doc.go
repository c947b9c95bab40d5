// Package kubebuild builds upstream Kubernetes' kubelet at a release, as
// its release build does, through the Go module proxy: the baseline `make
// bench` measures the agent beside. k8s.io/kubernetes replaces its
// staging modules (k8s.io/api, k8s.io/client-go, …) with directories of
// its own repository, which `go install` refuses, so the build is a
// module of its own that requires k8s.io/kubernetes and replaces each
// staging module with the release of it that matches (v0.N.P for
// v1.N.P). Built binaries are kept in a cache dir across runs.
package kubebuild
