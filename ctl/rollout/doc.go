// Package rollout owns the logic of `flotctl rollout`: whether a
// Deployment's or DaemonSet's rollout is done (and why not), a
// Deployment's revision history from its ReplicaSets, and the patches that
// undo and restart a rollout. It is pure; the commands fetch and send.
package rollout
