// Package controllers is the home of the hub's control loops, one package
// each: deployment, replicaset, daemonset, endpointslice, garbagecollector
// and nodelifecycle, built on internal/controlloop (the work loop) and
// controllerutil (what the loops share); manager starts them all (and the
// scheduler) on one shared informer cache.
//
// The loops never call each other. Each watches objects through informers,
// takes a key from a deduplicating rate-limited work queue, reads the
// current state from its cache, takes one step (writing one narrow kind of
// change through the API) and requeues with backoff on errors. The state
// that matters lives in the objects, so a restart, a dropped watch or a
// missed event costs a re-list, never a lost rollout.
package controllers
