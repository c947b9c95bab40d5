// Package packaging holds Flotilla's deb and rpm packages, as sources:
// nfpm configurations (nfpm/), the systemd units, default config files and
// maintainer scripts of flotilla-agent (agent/) and flotilla-hub (hub/),
// and build.sh, which `make packages` runs to build dist/ with nfpm.
//
// The Go code here is only its tests, run by `make test`: the nfpm
// configurations agree with .goreleaser.yaml and the Makefile; the amd64
// .debs pass lintian; dpkg installs them (the binaries run, the units and
// conffiles are in place) and purges them without leaving anything; the
// rpms hold the same files; an agent upgraded from one package to the
// next leaves its containers running; and the arm64 and armv7 agents run
// under qemu-user-static, with the agent's unit tests passing on arm64.
//
// The tests that need root or a tool (dpkg, lintian, rpm, qemu, containerd,
// docker-registry) skip with the reason when it is missing;
// scripts/install-deps.sh installs every one, and with CI=true a missing
// one fails the test instead.
package packaging
