// Package controllerutil is the small base every hub loop (the controllers
// and the scheduler) is built on, so that each loop only writes its
// reconcile step.
//
// It owns three things:
//
//   - Controller: a deduplicating, rate-limited work queue of string keys
//     ("namespace/name" or "name") drained by N workers that call one
//     ReconcileFunc per key. A key that fails is requeued with per-key
//     exponential backoff (5 ms doubling to 1000 s, plus an overall 10 qps
//     bucket: client-go's controller defaults); a key that succeeds has its
//     backoff forgotten. Run(ctx, workers) waits for the informer caches
//     registered with WaitFor, runs the workers and returns when ctx ends,
//     after every in-flight reconcile has returned.
//
//     c := controllerutil.New("replicaset", r.reconcile, controllerutil.Options{})
//     rsInformer.AddEventHandler(c.Handler())        // enqueue on add/update/delete
//     c.WaitFor(rsInformer.HasSynced, podInformer.HasSynced)
//     return c.Run(ctx, 2)
//
//     Reconcile reads from the informer caches, takes one step and returns.
//     Return an error to retry with backoff; call EnqueueAfter to look again
//     later (for example when a deadline will pass) and return nil.
//
//   - NewRecorder: a client-go tools/record EventRecorder whose events go to
//     the hub through the clientset's Events API (Normal/Warning, reason,
//     message; repeats are aggregated into counts by client-go's correlator).
//
//   - LeaderElection / RunElected: wraps a Run function with client-go's
//     leaderelection on a coordination.k8s.io Lease (by default in
//     flotilla-system), so that several hubs can run and only one runs each
//     loop. Disabled, RunElected simply calls run(ctx). On losing the lease
//     the loop's context is cancelled, the loop is waited for, and
//     ErrLeaderLost is returned; the caller decides (the hub exits, as
//     Kubernetes' components do, since its caches may be stale).
package controllerutil
