// Package store owns the hub's durable state: a revisioned key-value store
// with compare-and-swap writes, a bounded history of changes and watches
// from any revision still in that history. The Store interface is what the
// apiserver needs and what an etcd-backed implementation could satisfy; the
// bbolt implementation is the embedded default. Every implementation must
// pass the contract suite in storetest.
package store
