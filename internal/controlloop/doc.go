// Package controlloop is the small base every control loop of the project
// is built on — the hub's controllers, its scheduler and the GitOps loop —
// so that each loop writes only its reconcile step. It lives outside hub/
// because the GitOps loop, which runs in the hub but is not one of its
// controllers, needs it too.
//
// It owns three things:
//
//   - Loop: a deduplicating, rate-limited work queue of string keys
//     ("namespace/name" or "name") drained by N workers that call one
//     ReconcileFunc per key. A key that fails is requeued with per-key
//     exponential backoff (5 ms doubling to 1000 s, plus an overall 10 qps
//     bucket: client-go's controller defaults); a key that succeeds has its
//     backoff forgotten. Run(ctx, workers) waits for the informer caches
//     registered with WaitFor, runs the workers and returns when ctx ends,
//     after every in-flight reconcile has returned.
//
//     l := controlloop.New("replicaset", r.reconcile, controlloop.Options{})
//     rsInformer.AddEventHandler(l.Handler())        // enqueue on add/update/delete
//     l.WaitFor(rsInformer.HasSynced, podInformer.HasSynced)
//     return l.Run(ctx, 2)
//
//     Reconcile reads from the informer caches, takes one step and returns.
//     Return an error to retry with backoff; call EnqueueAfter to look again
//     later (for example when a deadline will pass) and return nil.
//
//   - The keys: Key for what an informer hands a handler (tombstones
//     included), ObjectKey for an object in hand, Deleted to unwrap a
//     delete handler's tombstone. A loop never builds "ns/name" itself, so
//     the keys it enqueues and the ones its expectations are kept under
//     cannot drift apart.
//
//   - NewRecorder: a client-go tools/record EventRecorder whose events go to
//     the hub through the clientset's Events API (Normal/Warning, reason,
//     message; repeats are aggregated into counts by client-go's correlator).
package controlloop
