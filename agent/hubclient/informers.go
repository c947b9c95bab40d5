package hubclient

import (
	"context"
	"reflect"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// Informer is a shared informer with the lister over its cache.
type Informer[L any] struct {
	Informer cache.SharedIndexInformer
	Lister   L
}

// Informers hands out one shared informer per kind, like client-go's
// SharedInformerFactory, for the kinds the agent watches cluster-wide.
type Informers struct {
	client Interface

	mu        sync.Mutex
	informers map[reflect.Type]cache.SharedIndexInformer
	started   map[reflect.Type]bool
	scopes    map[reflect.Type]string // label selector per kind
}

// NewInformers makes a factory whose informers list and watch through
// client, with no resync.
func NewInformers(client Interface) *Informers {
	return &Informers{client: client, informers: map[reflect.Type]cache.SharedIndexInformer{},
		started: map[reflect.Type]bool{}, scopes: map[reflect.Type]string{}}
}

// Scope narrows what the informer of obj's kind lists and watches to the
// objects labelSelector matches (a device takes only its site's
// EndpointSlices). Call it before anyone asks for the kind.
func (f *Informers) Scope(obj runtime.Object, labelSelector string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scopes[reflect.TypeOf(obj)] = labelSelector
}

// ScopeOf is the label selector Scope set for obj's kind, "" for all.
func (f *Informers) ScopeOf(obj runtime.Object) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.scopes[reflect.TypeOf(obj)]
}

// Narrow applies the scope of obj's kind to o, for list-watchers made
// outside this factory (the local cache's).
func (f *Informers) Narrow(obj runtime.Object, o *metav1.ListOptions) {
	if sel := f.ScopeOf(obj); sel != "" {
		o.LabelSelector = sel
	}
}

// InformerFor returns the informer of obj's kind, making it with newFunc
// if there is none yet: a caller that needs another source than the hub
// (the local cache) registers its own before anyone asks for the kind.
func (f *Informers) InformerFor(obj runtime.Object, newFunc func() cache.SharedIndexInformer) cache.SharedIndexInformer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := reflect.TypeOf(obj)
	if inf, ok := f.informers[t]; ok {
		return inf
	}
	inf := newFunc()
	f.informers[t] = inf
	return inf
}

// Start runs every informer not yet running until stop closes; callers
// that each registered informers may all call it.
func (f *Informers) Start(stop <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for t, inf := range f.informers {
		if !f.started[t] {
			go inf.Run(stop)
			f.started[t] = true
		}
	}
}

// WaitForCacheSync waits until every informer started so far has synced,
// and says whether they all did before stop closed.
func (f *Informers) WaitForCacheSync(stop <-chan struct{}) bool {
	f.mu.Lock()
	var synced []cache.InformerSynced
	for t, inf := range f.informers {
		if f.started[t] {
			synced = append(synced, inf.HasSynced)
		}
	}
	f.mu.Unlock()
	return cache.WaitForCacheSync(stop, synced...)
}

// Services is the cluster's Services.
func (f *Informers) Services() Informer[corelisters.ServiceLister] {
	inf := f.InformerFor(&corev1.Service{}, func() cache.SharedIndexInformer {
		return f.newInformer(&corev1.Service{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return f.client.CoreV1().Services(metav1.NamespaceAll).List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return f.client.CoreV1().Services(metav1.NamespaceAll).Watch(ctx, o)
			})
	})
	return Informer[corelisters.ServiceLister]{inf, corelisters.NewServiceLister(inf.GetIndexer())}
}

// EndpointSlices is the cluster's EndpointSlices, or those Scope says.
func (f *Informers) EndpointSlices() Informer[discoverylisters.EndpointSliceLister] {
	inf := f.InformerFor(&discoveryv1.EndpointSlice{}, func() cache.SharedIndexInformer {
		return f.newInformer(&discoveryv1.EndpointSlice{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return f.client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return f.client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).Watch(ctx, o)
			})
	})
	return Informer[discoverylisters.EndpointSliceLister]{inf, discoverylisters.NewEndpointSliceLister(inf.GetIndexer())}
}

// Nodes is the cluster's Nodes.
func (f *Informers) Nodes() Informer[corelisters.NodeLister] {
	inf := f.InformerFor(&corev1.Node{}, func() cache.SharedIndexInformer {
		return f.newInformer(&corev1.Node{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return f.client.CoreV1().Nodes().List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return f.client.CoreV1().Nodes().Watch(ctx, o)
			})
	})
	return Informer[corelisters.NodeLister]{inf, corelisters.NewNodeLister(inf.GetIndexer())}
}

// newInformer is what client-go's generated informers make: indexed by
// namespace, with watch-list semantics unless the client (a fake) says it
// has none.
func (f *Informers) newInformer(example runtime.Object,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.SharedIndexInformer {
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			f.Narrow(example, &o)
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			f.Narrow(example, &o)
			return watchFn(ctx, o)
		},
	}, f.client)
	return cache.NewSharedIndexInformer(lw, example, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}
