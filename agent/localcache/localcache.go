package localcache

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/agent/localstore"
	"flotilla.dev/flotilla/agent/resume"
)

// kindInfo is what the cache needs to know of one kind.
type kindInfo struct {
	kind    localstore.Kind
	example runtime.Object
	// list builds the kind's list object from the store.
	list func(s *localstore.Store) (runtime.Object, error)
	// replace rewrites the store from a list from the hub.
	replace func(s *localstore.Store, list runtime.Object, rv string) error
	// put writes one object through.
	put func(s *localstore.Store, obj any) error
	lw  func(c hubclient.Interface) *cache.ListWatch
}

// newKind describes a kind by its item type T and its list type.
func newKind[T any, PT interface {
	*T
	localstore.Object
}](kind localstore.Kind, toList func([]T) runtime.Object, items func(runtime.Object) []T,
	list func(context.Context, hubclient.Interface, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, hubclient.Interface, metav1.ListOptions) (watch.Interface, error)) kindInfo {
	return kindInfo{
		kind: kind, example: PT(new(T)),
		list: func(s *localstore.Store) (runtime.Object, error) {
			stored, err := localstore.List[T, PT](s, kind)
			out := make([]T, len(stored))
			for i, it := range stored {
				out[i] = *it
			}
			return toList(out), err
		},
		replace: func(s *localstore.Store, l runtime.Object, rv string) error {
			its := items(l)
			ptrs := make([]PT, len(its))
			for i := range its {
				ptrs[i] = &its[i]
			}
			return localstore.Replace(s, kind, ptrs, rv)
		},
		put: func(s *localstore.Store, obj any) error { return localstore.Put(s, kind, obj.(PT)) },
		lw: func(c hubclient.Interface) *cache.ListWatch {
			return &cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return list(ctx, c, o)
				},
				WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
					return watchFn(ctx, c, o)
				},
			}
		},
	}
}

var kinds = []kindInfo{
	newKind(localstore.Services,
		func(its []corev1.Service) runtime.Object { return &corev1.ServiceList{Items: its} },
		func(l runtime.Object) []corev1.Service { return l.(*corev1.ServiceList).Items },
		func(ctx context.Context, c hubclient.Interface, o metav1.ListOptions) (runtime.Object, error) {
			return c.CoreV1().Services(metav1.NamespaceAll).List(ctx, o)
		},
		func(ctx context.Context, c hubclient.Interface, o metav1.ListOptions) (watch.Interface, error) {
			return c.CoreV1().Services(metav1.NamespaceAll).Watch(ctx, o)
		}),
	newKind(localstore.EndpointSlices,
		func(its []discoveryv1.EndpointSlice) runtime.Object {
			return &discoveryv1.EndpointSliceList{Items: its}
		},
		func(l runtime.Object) []discoveryv1.EndpointSlice { return l.(*discoveryv1.EndpointSliceList).Items },
		func(ctx context.Context, c hubclient.Interface, o metav1.ListOptions) (runtime.Object, error) {
			return c.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, o)
		},
		func(ctx context.Context, c hubclient.Interface, o metav1.ListOptions) (watch.Interface, error) {
			return c.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).Watch(ctx, o)
		}),
	newKind(localstore.Nodes,
		func(its []corev1.Node) runtime.Object { return &corev1.NodeList{Items: its} },
		func(l runtime.Object) []corev1.Node { return l.(*corev1.NodeList).Items },
		func(ctx context.Context, c hubclient.Interface, o metav1.ListOptions) (runtime.Object, error) {
			return c.CoreV1().Nodes().List(ctx, o)
		},
		func(ctx context.Context, c hubclient.Interface, o metav1.ListOptions) (watch.Interface, error) {
			return c.CoreV1().Nodes().Watch(ctx, o)
		}),
}

// Install registers the Services, EndpointSlices and Nodes informers of
// factory as store-backed ones; call it before anything asks the factory
// for them.
func Install(factory *hubclient.Informers, client hubclient.Interface, store *localstore.Store, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	for _, k := range kinds {
		selector, err := labels.Parse(factory.ScopeOf(k.example))
		if err != nil {
			return fmt.Errorf("local cache of %s: scope: %w", k.kind, err)
		}
		lw := &listWatch{kind: k, hub: k.lw(client), store: store, selector: selector,
			narrow: func(o *metav1.ListOptions) { factory.Narrow(k.example, o) },
			log:    log.With("component", "localcache", "kind", string(k.kind))}
		inf := factory.InformerFor(k.example, func() cache.SharedIndexInformer {
			return cache.NewSharedIndexInformer(lw, k.example, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		})
		if _, err := inf.AddEventHandler(writeThrough(k, store, lw.log)); err != nil {
			return fmt.Errorf("local cache of %s: %w", k.kind, err)
		}
	}
	return nil
}

// listWatch answers the first list from the store and later ones from
// the hub, recording each in the store.
type listWatch struct {
	kind  kindInfo
	hub   *cache.ListWatch
	store *localstore.Store
	log   *slog.Logger
	// selector is the scope of the kind's informer (everything when
	// empty); narrow puts it into the hub's list and watch options.
	selector labels.Selector
	narrow   func(*metav1.ListOptions)

	mu     sync.Mutex
	served bool // the store answered the first list
	// resumed is the stored version the first list was answered with,
	// until the hub has been asked whether it has reached it.
	resumed string
	// otherScope: the informer holds a stored list made with another
	// scope, served while the hub was away.
	otherScope bool
}

var _ cache.ListerWatcher = (*listWatch)(nil)

// IsWatchListSemanticsUnSupported makes the reflector list then watch:
// the first list is where the store answers.
func (l *listWatch) IsWatchListSemanticsUnSupported() bool { return true }

func (l *listWatch) List(o metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), o)
}

func (l *listWatch) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	l.mu.Lock()
	first := !l.served
	l.served = true
	l.mu.Unlock()
	// What the store holds was listed with the scope recorded beside it.
	// Another scope (the device moved to another site, or was upgraded to
	// sites) asks the hub first: a watch resumed from the store's version
	// would never send the objects the old scope left out.
	sameScope := l.storedScope() == l.selector.String()
	if first && sameScope {
		if obj, ok := l.stored(); ok {
			if acc, err := meta.ListAccessor(obj); err == nil {
				l.mu.Lock()
				l.resumed = acc.GetResourceVersion()
				l.mu.Unlock()
			}
			return obj, nil
		}
	}
	l.narrow(&o)
	obj, err := l.hub.ListWithContext(ctx, o)
	if err != nil {
		if cached, ok := l.stored(); ok {
			// The hub is away: the last known list keeps the device's
			// rules as they were, whatever its scope; the watch's
			// failure retries the hub.
			l.log.Debug("the hub did not answer the list; serving the local cache", "err", err)
			l.mu.Lock()
			l.otherScope = !sameScope
			l.mu.Unlock()
			return cached, nil
		}
		return nil, err
	}
	l.mu.Lock()
	l.otherScope = false
	l.mu.Unlock()
	rv := ""
	if acc, err := meta.ListAccessor(obj); err == nil {
		rv = acc.GetResourceVersion()
	}
	if err := l.kind.replace(l.store, obj, rv); err != nil {
		l.log.Warn("could not record the hub's list in the local store", "err", err)
	} else if !sameScope {
		if err := l.store.SetFact(l.scopeFact(), l.selector.String()); err != nil {
			l.log.Warn("could not record the scope of the hub's list in the local store", "err", err)
		}
	}
	return obj, nil
}

func (l *listWatch) scopeFact() string { return "list-scope/" + string(l.kind.kind) }

// storedScope is the label selector the stored list was made with.
func (l *listWatch) storedScope() string {
	v, err := l.store.Fact(l.scopeFact())
	if err != nil {
		return ""
	}
	return v
}

// stored is the store's whole list, when it has one from the hub.
func (l *listWatch) stored() (runtime.Object, bool) {
	rv, err := l.store.ResourceVersion(l.kind.kind)
	if err != nil || rv == "" {
		return nil, false
	}
	obj, err := l.kind.list(l.store)
	if err != nil {
		// The list holds every entry that could be read; one damaged
		// entry must not cost the device its other rules.
		l.log.Warn("some objects in the local cache cannot be read; serving the others", "err", err)
	}
	if acc, err := meta.ListAccessor(obj); err == nil {
		acc.SetResourceVersion(rv)
	}
	return obj, true
}

func (l *listWatch) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), o)
}

func (l *listWatch) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	l.mu.Lock()
	resumed := l.resumed
	l.mu.Unlock()
	if resumed != "" {
		// A hub behind the stored version holds another history; its 410
		// makes the informer list the hub (later lists are the hub's).
		err := resume.CheckReached(ctx, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l.narrow(&o)
			return l.hub.ListWithContext(ctx, o)
		}, resumed)
		if err == nil || apierrors.IsResourceExpired(err) {
			l.mu.Lock()
			l.resumed = ""
			l.mu.Unlock()
		}
		if err != nil {
			return nil, err
		}
	}
	l.narrow(&o)
	w, err := l.hub.WatchWithContext(ctx, o)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	relist := l.otherScope
	l.mu.Unlock()
	if relist {
		// The hub answers again, but the informer holds a list of
		// another scope: an expired version makes it list anew.
		w.Stop()
		return nil, apierrors.NewResourceExpired("the local cache was listed with another scope; listing again")
	}
	return w, nil
}

// writeThrough records every event in the store.
func writeThrough(k kindInfo, store *localstore.Store, log *slog.Logger) cache.ResourceEventHandler {
	put := func(obj any) {
		if err := k.put(store, obj); err != nil {
			log.Warn("could not record an object in the local store", "err", err)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { put(obj) },
		UpdateFunc: func(_, obj any) { put(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			m, err := meta.Accessor(obj)
			if err != nil {
				return
			}
			if err := store.Delete(k.kind, m.GetNamespace(), m.GetName()); err != nil {
				log.Warn("could not remove an object from the local store", "err", err)
			}
		},
	}
}
