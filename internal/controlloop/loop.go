package controlloop

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

// Options tune a Loop; the zero value gives client-go's defaults.
type Options struct {
	// RateLimiter decides when a failed key is retried. Default:
	// workqueue.DefaultTypedControllerRateLimiter.
	RateLimiter workqueue.TypedRateLimiter[string]
	// Logger receives reconcile failures. Default: slog.Default().
	Logger *slog.Logger
}

// Loop drains a deduplicating work queue of keys with N workers.
type Loop struct {
	name      string
	reconcile ReconcileFunc
	queue     workqueue.TypedRateLimitingInterface[string]
	log       *slog.Logger

	mu     sync.Mutex
	synced []cache.InformerSynced
}

// New returns a Loop named name (used in logs and queue metrics)
// that calls reconcile for every key taken from its queue.
func New(name string, reconcile ReconcileFunc, opts Options) *Loop {
	rl := opts.RateLimiter
	if rl == nil {
		rl = workqueue.DefaultTypedControllerRateLimiter[string]()
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Loop{
		name:      name,
		reconcile: reconcile,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(rl,
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name}),
		log: log.With("controller", name),
	}
}

// Name is the name given to New.
func (l *Loop) Name() string { return l.name }

// Queue exposes the work queue, for loops that need Len or NumRequeues.
func (l *Loop) Queue() workqueue.TypedRateLimitingInterface[string] { return l.queue }

// WaitFor registers informer caches that Run waits for before the first
// reconcile, so no step is taken from a partial view.
func (l *Loop) WaitFor(synced ...cache.InformerSynced) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.synced = append(l.synced, synced...)
}

// Enqueue adds obj's key. Objects without metadata are logged and dropped:
// they can only come from a programming error in a handler.
func (l *Loop) Enqueue(obj any) {
	key, err := Key(obj)
	if err != nil {
		l.log.Error("cannot enqueue object", "err", err)
		return
	}
	l.queue.Add(key)
}

// EnqueueKey adds a key directly.
func (l *Loop) EnqueueKey(key string) { l.queue.Add(key) }

// EnqueueAfter adds key once d has passed (deduplicated with any other
// addition of the same key).
func (l *Loop) EnqueueAfter(key string, d time.Duration) { l.queue.AddAfter(key, d) }

// Handler enqueues the object on every add, update and delete: the usual
// handler for the loop's primary kind.
func (l *Loop) Handler() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    l.Enqueue,
		UpdateFunc: func(_, obj any) { l.Enqueue(obj) },
		DeleteFunc: l.Enqueue,
	}
}

// Run waits for the registered caches, starts workers goroutines and blocks
// until ctx ends; it then shuts the queue down and returns once every
// in-flight reconcile has returned. It returns nil when stopped by ctx.
func (l *Loop) Run(ctx context.Context, workers int) error {
	if workers < 1 {
		return fmt.Errorf("controller %s: workers must be at least 1, got %d", l.name, workers)
	}
	defer l.queue.ShutDown()

	l.mu.Lock()
	synced := append([]cache.InformerSynced(nil), l.synced...)
	l.mu.Unlock()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("controller %s: informer caches did not sync", l.name)
	}
	l.log.Debug("controller started", "workers", workers)

	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	l.queue.ShutDown()
	wg.Wait()
	l.log.Debug("controller stopped")
	return nil
}

// processNext reconciles one key; false means the queue is shut down.
func (l *Loop) processNext(ctx context.Context) bool {
	key, shutdown := l.queue.Get()
	if shutdown {
		return false
	}
	defer l.queue.Done(key)

	err := l.reconcile(ctx, key)
	switch {
	case err == nil:
		l.queue.Forget(key)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		// Stopping: the next leader or the next start re-lists and retries.
	default:
		l.log.Warn("reconcile failed, will retry", "key", key,
			"retries", l.queue.NumRequeues(key), "err", err)
		l.queue.AddRateLimited(key)
	}
	return true
}
