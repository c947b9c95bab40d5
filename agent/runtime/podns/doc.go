// Package podns creates, enters and removes the Linux namespaces a pod's
// containers share (network, IPC, UTS) without any process holding them:
// each namespace is created by a thread that unshares it and bind-mounts
// its nsfs file onto a path, then switches back. The bind mount keeps the
// namespace alive until Remove unmounts it, so a pod needs no pause
// process, survives an agent restart, and its containers join the
// namespaces by path in their OCI spec.
package podns
