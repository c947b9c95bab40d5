package kubelet

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"flotilla.dev/flotilla/agent/localstore"
	"flotilla.dev/flotilla/api/podutil"
)

// CacheSource serves the hub's pods from the local store while the hub
// source has not synced: after an agent restart or a reboot without the
// hub, the device runs what the hub last asked of it. Once the hub source
// syncs it is the only truth, the store is rewritten from it, and the
// cache serves nothing more.
type CacheSource struct {
	hub   *HubSource
	store *localstore.Store
	log   *slog.Logger

	mu     sync.Mutex
	pods   map[types.UID]*corev1.Pod
	loaded bool
	// complete is set when the store holds a whole list from the hub
	// (not a first start that never reached it): only then does a pod
	// missing from the cache mean the hub does not want it.
	complete bool
}

var (
	_ PodSource = (*CacheSource)(nil)
	_ standIn   = (*CacheSource)(nil)
)

// NewCacheSource stands in for hub with what store holds. It makes hub
// record every pod in store before the kubelet acts on it.
func NewCacheSource(hub *HubSource, store *localstore.Store, log *slog.Logger) (*CacheSource, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := hub.persist(store, log); err != nil {
		return nil, fmt.Errorf("cache source: %w", err)
	}
	return &CacheSource{hub: hub, store: store, log: log, pods: map[types.UID]*corev1.Pod{}}, nil
}

func (c *CacheSource) Name() string        { return "cache" }
func (c *CacheSource) StandsInFor() string { return c.hub.Name() }

// Run loads the cache, then waits for the hub to sync and hands over.
func (c *CacheSource) Run(ctx context.Context, notify func(types.UID)) error {
	pods, err := localstore.List[corev1.Pod](c.store, localstore.Pods)
	if err != nil {
		// List returns every entry it could read: a damaged one must not
		// keep the others from running.
		c.log.Warn("some cached pods cannot be read; running the others", "err", err)
	}
	rv, err := c.store.ResourceVersion(localstore.Pods)
	if err != nil {
		return fmt.Errorf("reading cached pods: %w", err)
	}
	// The store keeps the hub's mirror pods too (for the hub source to
	// resume with); they stand for static pods, which are not the
	// cache's to run.
	pods = slices.DeleteFunc(pods, func(p *corev1.Pod) bool { return podutil.IsMirror(p) })
	c.mu.Lock()
	for _, p := range pods {
		c.pods[p.UID] = p
	}
	c.loaded, c.complete = true, rv != ""
	c.mu.Unlock()
	if !c.hub.HasSynced() {
		c.log.Info("serving pods from the local cache until the hub answers", "pods", len(pods), "resourceVersion", rv)
	}
	for _, p := range pods {
		notify(p.UID)
	}

	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for !c.hub.HasSynced() {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
	return c.handOver(notify)
}

// handOver makes the store exactly the hub's set and wakes every pod the
// cache served, whose workers now see the hub's verdict.
func (c *CacheSource) handOver(notify func(types.UID)) error {
	hubPods := c.hub.List()
	if err := localstore.Replace(c.store, localstore.Pods, c.hub.all(), c.hub.LastSyncResourceVersion()); err != nil {
		// Not fatal: the write-through keeps the store close, and the
		// next start re-lists.
		c.log.Warn("could not rewrite the local pod cache from the hub", "err", err)
	} else if err := c.store.SetFact(factPodsWithMirrors, "true"); err != nil {
		c.log.Warn("could not mark the local pod cache as whole", "err", err)
	}
	c.mu.Lock()
	served := c.pods
	// The store now holds a whole list from the hub.
	c.pods, c.complete = map[types.UID]*corev1.Pod{}, true
	c.mu.Unlock()
	if len(served) > 0 {
		c.log.Info("the hub answered; it is the pods' source again", "cached", len(served), "hub", len(hubPods))
	}
	for uid := range served {
		notify(uid)
	}
	return nil
}

// HasSynced is true once the cache holds a whole list from an earlier
// sync with the hub.
func (c *CacheSource) HasSynced() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loaded && c.complete
}

func (c *CacheSource) Get(uid types.UID) (*corev1.Pod, bool) {
	if c.hub.HasSynced() {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pods[uid]
	return p, ok
}

func (c *CacheSource) List() []*corev1.Pod {
	if c.hub.HasSynced() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(c.pods))
	for _, p := range c.pods {
		out = append(out, p)
	}
	return out
}
