// Package garbagecollector owns cascading deletion through
// ownerReferences, as Kubernetes' garbage collector does, on a
// metadata-only view (PartialObjectMetadata informers) of every served kind
// but Events.
//
// Three behaviours, chosen by the apiserver from DeleteOptions:
//
//   - Background: the owner is gone at once; a dependent whose owners are
//     all gone (checked with a live read, not only the cache) is deleted,
//     and a dependent that still has a living owner only loses the
//     references to the dead ones.
//   - Orphan: the owner carries the "orphan" finalizer; its dependents lose
//     their ownerReference to it, then the finalizer is removed and the
//     apiserver finishes the deletion.
//   - Foreground: the owner carries the "foregroundDeletion" finalizer; its
//     dependents are deleted (themselves in the foreground when they have
//     dependents), and once no dependent with blockOwnerDeletion remains
//     the finalizer is removed.
package garbagecollector
