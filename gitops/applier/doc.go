// Package applier makes the hub's objects match one revision: it checks
// the whole revision first (unknown kinds, duplicates, objects of other
// sources, a server-side dry run of every write) and writes nothing when
// anything is wrong; then it creates and updates in dependency order and
// prunes what left the revision, from the inventory only.
//
// The source owns the fields its manifests set. Each object keeps the
// manifest it was last applied from in an annotation, so a three-way
// strategic merge (as kubectl apply does) removes fields the manifest
// dropped, puts back fields someone changed by hand, and keeps everything
// else: status, allocated addresses, finalizers, other people's labels.
// An object whose merge changes nothing is not written.
package applier
