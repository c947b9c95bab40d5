// Package e2e holds the fleet tests: a hub and several agents, each agent
// in its own network namespace as its own device, a real registry, a real
// bare Git repository the hub follows — the same fleet `make demo` builds
// (scripts/demo.sh), under other names so both can run side by side.
// They need root, containerd, docker-registry, git, curl and iproute2, and
// skip with the reason when any is missing.
package e2e
