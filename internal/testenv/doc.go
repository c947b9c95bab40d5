// Package testenv states what a test needs from the machine, in one place.
//
// Flotilla's tests come in tiers:
//
//   - unit: no root, no daemon, no network namespace, no built binary, a
//     few seconds at most. `go test -short ./...` (make unit) runs only
//     these.
//   - integration: root, containerd, CNI plugins, iptables, network
//     namespaces, the hub or agent binaries, or more than a few seconds.
//     Each such test calls Integration (directly or through RequireRoot,
//     RequireContainerd, RequireNetNS) and is skipped with -short.
//
// When a requirement is missing the test is skipped with the reason; but
// when the CI environment variable is set it fails with the same reason:
// CI installs everything (scripts/install-deps.sh) and must run every tier,
// so a missing tool there is a broken setup, not a reason to pass. -short
// is a choice, not a missing requirement: it skips under CI too.
package testenv
