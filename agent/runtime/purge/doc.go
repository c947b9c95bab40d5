// Package purge deletes a containerd namespace with everything in it:
// tasks, containers, images, leases, snapshots, content, the namespace
// itself and the empty cgroups runc leaves behind. flotilla-agent cleanup
// uses it to decommission a device, and tests use it to leave nothing
// behind.
//
// It is a package of its own, not part of package runtime, so that test
// helpers which runtime's own tests import (test/testimage) can use it
// without an import cycle.
package purge
