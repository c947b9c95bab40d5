// Package resume lets an informer on a device start from what the device
// stored and resume its watch from the stored resourceVersion, so that an
// agent that restarts, or a device that reboots, asks the hub only for
// what changed while it was gone — and lists again when the hub says that
// version has expired or holds another history.
package resume
