package controllerutil

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// ReconcileFunc takes one step towards the desired state of the object
// named by key. A non-nil error requeues the key with backoff.
type ReconcileFunc func(ctx context.Context, key string) error

// Options tune a Controller; the zero value gives client-go's defaults.
type Options struct {
	// RateLimiter decides when a failed key is retried. Default:
	// workqueue.DefaultTypedControllerRateLimiter.
	RateLimiter workqueue.TypedRateLimiter[string]
	// Logger receives reconcile failures. Default: slog.Default().
	Logger *slog.Logger
}

// Controller drains a deduplicating work queue of keys with N workers.
type Controller struct {
	name      string
	reconcile ReconcileFunc
	queue     workqueue.TypedRateLimitingInterface[string]
	log       *slog.Logger

	mu     sync.Mutex
	synced []cache.InformerSynced
}

// New returns a Controller named name (used in logs and queue metrics)
// that calls reconcile for every key taken from its queue.
func New(name string, reconcile ReconcileFunc, opts Options) *Controller {
	rl := opts.RateLimiter
	if rl == nil {
		rl = workqueue.DefaultTypedControllerRateLimiter[string]()
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Controller{
		name:      name,
		reconcile: reconcile,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(rl,
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name}),
		log: log.With("controller", name),
	}
}

// Name is the name given to New.
func (c *Controller) Name() string { return c.name }

// Queue exposes the work queue, for loops that need Len or NumRequeues.
func (c *Controller) Queue() workqueue.TypedRateLimitingInterface[string] { return c.queue }

// WaitFor registers informer caches that Run waits for before the first
// reconcile, so no step is taken from a partial view.
func (c *Controller) WaitFor(synced ...cache.InformerSynced) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.synced = append(c.synced, synced...)
}

// Key returns the queue key of an informer object: "namespace/name", or
// "name" for cluster-scoped objects. It understands the tombstones
// (cache.DeletedFinalStateUnknown) informers hand to delete handlers.
func Key(obj any) (string, error) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return "", fmt.Errorf("queue key for %T: %w", obj, err)
	}
	return key, nil
}

// Deleted returns the object a delete handler was given, unwrapping the
// tombstone (cache.DeletedFinalStateUnknown) an informer hands over when it
// missed the delete itself; ok is false when it is not a T.
func Deleted[T any](obj any) (T, bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	t, ok := obj.(T)
	return t, ok
}

// Enqueue adds obj's key. Objects without metadata are logged and dropped:
// they can only come from a programming error in a handler.
func (c *Controller) Enqueue(obj any) {
	key, err := Key(obj)
	if err != nil {
		c.log.Error("cannot enqueue object", "err", err)
		return
	}
	c.queue.Add(key)
}

// EnqueueKey adds a key directly.
func (c *Controller) EnqueueKey(key string) { c.queue.Add(key) }

// EnqueueAfter adds key once d has passed (deduplicated with any other
// addition of the same key).
func (c *Controller) EnqueueAfter(key string, d time.Duration) { c.queue.AddAfter(key, d) }

// Handler enqueues the object on every add, update and delete: the usual
// handler for the loop's primary kind.
func (c *Controller) Handler() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    c.Enqueue,
		UpdateFunc: func(_, obj any) { c.Enqueue(obj) },
		DeleteFunc: c.Enqueue,
	}
}

// Run waits for the registered caches, starts workers goroutines and blocks
// until ctx ends; it then shuts the queue down and returns once every
// in-flight reconcile has returned. It returns nil when stopped by ctx.
func (c *Controller) Run(ctx context.Context, workers int) error {
	if workers < 1 {
		return fmt.Errorf("controller %s: workers must be at least 1, got %d", c.name, workers)
	}
	defer c.queue.ShutDown()

	c.mu.Lock()
	synced := append([]cache.InformerSynced(nil), c.synced...)
	c.mu.Unlock()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("controller %s: informer caches did not sync", c.name)
	}
	c.log.Debug("controller started", "workers", workers)

	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	c.log.Debug("controller stopped")
	return nil
}

// processNext reconciles one key; false means the queue is shut down.
func (c *Controller) processNext(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)

	err := c.reconcile(ctx, key)
	switch {
	case err == nil:
		c.queue.Forget(key)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		// Stopping: the next leader or the next start re-lists and retries.
	default:
		c.log.Warn("reconcile failed, will retry", "key", key,
			"retries", c.queue.NumRequeues(key), "err", err)
		c.queue.AddRateLimited(key)
	}
	return true
}
