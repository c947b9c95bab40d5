// Package store owns the hub's durable state: a revisioned key-value store
// with compare-and-swap writes, a bounded history of changes and watches
// from any revision still in that history. The Store interface is what the
// apiserver needs and what an etcd-backed implementation could satisfy; the
// bbolt implementation is the embedded default. Every implementation must
// pass the contract suite in storetest.
//
// Revisions: an empty store is at revision 0 and every successful write
// adds exactly one. Watch(prefix, rev) delivers the changes after rev, so
// rev 0 replays the whole history (ErrCompacted once any was compacted); to
// watch from now, pass the revision a List or Revision returned. Values
// returned by Get and List belong to the caller; event values delivered by
// Watch may be shared between watchers and must be treated as read-only.
package store
