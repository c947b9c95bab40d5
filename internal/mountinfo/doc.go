// Package mountinfo reads the mount points of this process's mount
// namespace from /proc/self/mountinfo: the agent's volume teardown and the
// bench's cleanup after an upstream kubelet both need the mounts under a
// directory.
package mountinfo
