// Package etcdstore is the hub's store on etcd, for fleets that run
// several hubs over one distributed store: store.Store on
// go.etcd.io/etcd/client/v3. The object's resourceVersion is the etcd
// revision of its last write; creates, updates and deletes are
// transactions that compare the key's create or mod revision, so a stale
// write is a conflict; a watch resumes from any revision etcd still holds,
// and one that etcd compacted is ErrCompacted (410 Gone to API clients).
//
// Keys live under a prefix ("/flotilla" by default), so one etcd can hold
// other data, and each hub sharing it sees the same objects. The etcd
// revision counts every write to the cluster: with other writers in the
// same etcd, revisions of Flotilla's objects are increasing but not
// consecutive, which the store contract allows (it promises order, not
// density, to API clients). The hub's Secrets wrapper (hub/secrets)
// encrypts values before they reach this store, so etcd holds no plain
// Secret.
package etcdstore
