package kubelet

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/agent/localstore"
	"flotilla.dev/flotilla/agent/resume"
)

// objKey names a ConfigMap or Secret.
type objKey struct {
	kind, namespace, name string // kind: "configmaps" or "secrets"
}

// objWatch is one object's watch (a field-selected informer) and the
// pods that use it.
type objWatch struct {
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	users    map[types.UID]bool
}

// objectCache serves the ConfigMaps and Secrets of this device's pods from
// one watch per object (field selector metadata.name), as the kubelet's
// watch-based manager does: the agent reads only what its pods use, and
// a change pokes the pods that use the object, which re-run env and
// volume setup.
type objectCache struct {
	client   hubclient.Interface
	onChange func(types.UID)
	// store, when set, keeps every object read, so that pods start after
	// a reboot without the hub; nil keeps nothing.
	store *localstore.Store
	log   *slog.Logger
	// syncTimeout bounds waiting for a new watch's first list.
	syncTimeout time.Duration

	mu      sync.Mutex
	ctx     context.Context
	watches map[objKey]*objWatch
	pods    map[types.UID]map[objKey]bool
}

func newObjectCache(client hubclient.Interface, onChange func(types.UID)) *objectCache {
	return &objectCache{client: client, onChange: onChange, syncTimeout: 10 * time.Second,
		ctx: context.Background(), watches: map[objKey]*objWatch{}, pods: map[types.UID]map[objKey]bool{}}
}

// start sets the context watches live in.
func (c *objectCache) start(ctx context.Context) {
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
}

// podRefs lists the ConfigMaps and Secrets a pod refers to, image pull
// secrets included.
func podRefs(pod *corev1.Pod) map[objKey]bool {
	refs := map[objKey]bool{}
	add := func(kind, name string) {
		if name != "" {
			refs[objKey{kind, pod.Namespace, name}] = true
		}
	}
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			add("configmaps", v.ConfigMap.Name)
		case v.Secret != nil:
			add("secrets", v.Secret.SecretName)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					add("configmaps", s.ConfigMap.Name)
				}
				if s.Secret != nil {
					add("secrets", s.Secret.Name)
				}
			}
		}
	}
	// Kept like the rest, so that a pull from a private registry (a local
	// mirror, say) works while the hub is away.
	for _, s := range pod.Spec.ImagePullSecrets {
		add("secrets", s.Name)
	}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			for _, e := range c.EnvFrom {
				if e.ConfigMapRef != nil {
					add("configmaps", e.ConfigMapRef.Name)
				}
				if e.SecretRef != nil {
					add("secrets", e.SecretRef.Name)
				}
			}
			for _, e := range c.Env {
				if e.ValueFrom == nil {
					continue
				}
				if e.ValueFrom.ConfigMapKeyRef != nil {
					add("configmaps", e.ValueFrom.ConfigMapKeyRef.Name)
				}
				if e.ValueFrom.SecretKeyRef != nil {
					add("secrets", e.ValueFrom.SecretKeyRef.Name)
				}
			}
		}
	}
	return refs
}

// setPod registers what pod uses and releases what it no longer does.
func (c *objectCache) setPod(pod *corev1.Pod) {
	refs := podRefs(pod)
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.pods[pod.UID]
	for k := range refs {
		w := c.ensureLocked(k)
		w.users[pod.UID] = true
	}
	for k := range old {
		if !refs[k] {
			c.releaseLocked(k, pod.UID)
		}
	}
	if len(refs) == 0 {
		delete(c.pods, pod.UID)
	} else {
		c.pods[pod.UID] = refs
	}
}

// removePod releases everything the pod used.
func (c *objectCache) removePod(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.pods[uid] {
		c.releaseLocked(k, uid)
	}
	delete(c.pods, uid)
}

func (c *objectCache) releaseLocked(k objKey, uid types.UID) {
	w, ok := c.watches[k]
	if !ok {
		return
	}
	delete(w.users, uid)
	if len(w.users) == 0 {
		w.cancel()
		delete(c.watches, k)
	}
}

func (c *objectCache) ensureLocked(k objKey) *objWatch {
	if w, ok := c.watches[k]; ok {
		return w
	}
	sel := fields.OneTermEqualSelector("metadata.name", k.name).String()
	var lw *cache.ListWatch
	var example runtime.Object
	switch k.kind {
	case "configmaps":
		example = &corev1.ConfigMap{}
		lw = &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.FieldSelector = sel
				return c.client.CoreV1().ConfigMaps(k.namespace).List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = sel
				return c.client.CoreV1().ConfigMaps(k.namespace).Watch(ctx, o)
			},
		}
	default:
		example = &corev1.Secret{}
		lw = &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.FieldSelector = sel
				return c.client.CoreV1().Secrets(k.namespace).List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = sel
				return c.client.CoreV1().Secrets(k.namespace).Watch(ctx, o)
			},
		}
	}
	// The watch resumes from the version the store holds, so a restart
	// asks the hub only whether the object changed since.
	resuming := &resume.ListWatch{Hub: lw, Stored: func() (runtime.Object, bool) { return c.storedList(k) }}
	inf := cache.NewSharedIndexInformer(resuming, example, 0, cache.Indexers{})
	ctx, cancel := context.WithCancel(c.ctx)
	w := &objWatch{informer: inf, cancel: cancel, users: map[types.UID]bool{}}
	notify := func(any) {
		c.mu.Lock()
		users := make([]types.UID, 0, len(w.users))
		for u := range w.users {
			users = append(users, u)
		}
		c.mu.Unlock()
		for _, u := range users {
			c.onChange(u)
		}
	}
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.remember(k, o); notify(o) },
		UpdateFunc: func(_, o any) { c.remember(k, o); notify(o) },
		DeleteFunc: func(o any) { c.remember(k, nil); notify(o) },
	})
	c.watches[k] = w
	go inf.RunWithContext(ctx)
	return w
}

func (c *objectCache) get(ctx context.Context, k objKey) (any, error) {
	if c.client == nil {
		return nil, fmt.Errorf("%s %s/%s: this device runs without a hub, and only the hub serves ConfigMaps and Secrets", singular(k.kind), k.namespace, k.name)
	}
	c.mu.Lock()
	w := c.ensureLocked(k)
	if len(w.users) == 0 {
		// Asked for outside any pod's references: serve it, but do not
		// keep a watch nobody releases.
		defer func() {
			c.mu.Lock()
			if len(w.users) == 0 && c.watches[k] == w {
				w.cancel()
				delete(c.watches, k)
			}
			c.mu.Unlock()
		}()
	}
	c.mu.Unlock()
	if !w.informer.HasSynced() {
		if obj, ok := c.recalled(k); ok {
			// The hub is away or slow: the last known content lets the
			// pod start now; a change pokes it once the watch syncs.
			return obj, nil
		}
		sctx, cancel := context.WithTimeout(ctx, c.syncTimeout)
		ok := cache.WaitForCacheSync(sctx.Done(), w.informer.HasSynced)
		cancel()
		if !ok {
			return nil, fmt.Errorf("failed to sync %s cache: timed out waiting for the condition (is the hub reachable?)", singular(k.kind))
		}
	}
	obj, exists, err := w.informer.GetStore().GetByKey(k.namespace + "/" + k.name)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: singular(k.kind)}, k.name)
	}
	return obj, nil
}

func singular(kind string) string {
	if kind == "configmaps" {
		return "configmap"
	}
	return "secret"
}

// ConfigMap implements envvars.Objects and volumes.Objects.
func (c *objectCache) ConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	obj, err := c.get(ctx, objKey{"configmaps", ns, name})
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.ConfigMap), nil
}

// Secret implements envvars.Objects and volumes.Objects.
func (c *objectCache) Secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	obj, err := c.get(ctx, objKey{"secrets", ns, name})
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Secret), nil
}

// remember writes what the watch delivered to the store: the object, or
// (nil) its deletion.
func (c *objectCache) remember(k objKey, obj any) {
	if c.store == nil {
		return
	}
	var err error
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		err = localstore.Put(c.store, localstore.ConfigMaps, o)
	case *corev1.Secret:
		err = localstore.Put(c.store, localstore.Secrets, o)
	case nil:
		err = c.store.Delete(storeKind(k), k.namespace, k.name)
	}
	if err != nil {
		c.log.Warn("could not record a pod's object in the local store", singular(k.kind), k.namespace+"/"+k.name, "err", err)
	}
}

// recalled is the object as last recorded in the store.
func (c *objectCache) recalled(k objKey) (any, bool) {
	if c.store == nil {
		return nil, false
	}
	var obj any
	var ok bool
	var err error
	switch k.kind {
	case "configmaps":
		obj, ok, err = localstore.Get[corev1.ConfigMap](c.store, localstore.ConfigMaps, k.namespace, k.name)
	default:
		obj, ok, err = localstore.Get[corev1.Secret](c.store, localstore.Secrets, k.namespace, k.name)
	}
	if err != nil {
		c.log.Warn("could not read a pod's object from the local store", singular(k.kind), k.namespace+"/"+k.name, "err", err)
		return nil, false
	}
	return obj, ok
}

// storedList is the stored object as a list of one at the object's own
// version, for a watch to resume from; false when the store has none.
func (c *objectCache) storedList(k objKey) (runtime.Object, bool) {
	obj, ok := c.recalled(k)
	if !ok {
		return nil, false
	}
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: o.ResourceVersion}, Items: []corev1.ConfigMap{*o}}, o.ResourceVersion != ""
	case *corev1.Secret:
		return &corev1.SecretList{ListMeta: metav1.ListMeta{ResourceVersion: o.ResourceVersion}, Items: []corev1.Secret{*o}}, o.ResourceVersion != ""
	}
	return nil, false
}

func storeKind(k objKey) localstore.Kind {
	if k.kind == "configmaps" {
		return localstore.ConfigMaps
	}
	return localstore.Secrets
}
