// Package atomicfile writes files that must survive a power cut: a
// device's identity, its pod CIDR, a sandbox's record, the CNI
// configuration. After a crash at any instant such a file holds either
// its old content or its new content, never a torn mix and never an
// empty file, because the agent reads them back at boot with nothing
// else to fall back on.
package atomicfile
