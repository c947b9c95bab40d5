package kubelet

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/agent/localstore"
	"flotilla.dev/flotilla/agent/resume"
	"flotilla.dev/flotilla/api/podutil"
)

// PodSource is one origin of the pods this device should run. The kubelet
// merges its sources: a pod is desired when any source has it.
type PodSource interface {
	// Name says where pods come from ("hub", "static", "cache").
	Name() string
	// Run delivers pods until ctx ends, calling notify with the UID of
	// every pod added, changed or removed.
	Run(ctx context.Context, notify func(types.UID)) error
	// HasSynced reports whether the source delivered its full initial
	// set; until every source has, nothing found running is treated as an
	// orphan.
	HasSynced() bool
	// Get returns the pod with uid if the source has it.
	Get(uid types.UID) (*corev1.Pod, bool)
	// List returns all the source's pods.
	List() []*corev1.Pod
}

const uidIndex = "uid"

// factPodsWithMirrors marks a store whose pods include the hub's mirror
// pods (agents before resumed watches left them out), so that a resumed
// watch starts from a whole list.
const factPodsWithMirrors = "pods-with-mirrors"

// HubSource is the pods bound to this node on the hub, through an
// informer with the field selector spec.nodeName=<node>.
type HubSource struct {
	informer cache.SharedIndexInformer
	lw       *resume.ListWatch
	// store, when set, receives every pod before the kubelet can act on
	// it, so that a restart without the hub finds what was running, and
	// gives the informer its first list, so that its watch resumes from
	// the stored resourceVersion.
	store *localstore.Store
	log   *slog.Logger
}

var _ PodSource = (*HubSource)(nil)

// NewHubSource returns the hub's pods bound to node.
func NewHubSource(client hubclient.Interface, node string) *HubSource {
	sel := fields.OneTermEqualSelector("spec.nodeName", node).String()
	s := &HubSource{}
	s.lw = &resume.ListWatch{
		Hub: &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.FieldSelector = sel
				return client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = sel
				return client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
			},
		},
		Stored: s.stored,
	}
	s.informer = cache.NewSharedIndexInformer(s.lw, &corev1.Pod{}, 0, cache.Indexers{
		uidIndex: func(obj any) ([]string, error) {
			if p, ok := obj.(*corev1.Pod); ok {
				return []string{string(p.UID)}, nil
			}
			return nil, nil
		},
	})
	return s
}

// stored is the hub's last whole list of this node's pods (mirror pods
// included), as the store keeps it, with the version of the last event
// recorded; false when the store has never held a whole list.
func (s *HubSource) stored() (runtime.Object, bool) {
	if s.store == nil {
		return nil, false
	}
	rv, err := s.store.ResourceVersion(localstore.Pods)
	if err != nil || rv == "" {
		return nil, false
	}
	if f, _ := s.store.Fact(factPodsWithMirrors); f != "true" {
		// Written by an agent that kept no mirror pods: a watch resumed
		// from it would never deliver the unchanged mirrors.
		return nil, false
	}
	pods, err := localstore.List[corev1.Pod](s.store, localstore.Pods)
	if err != nil {
		// A damaged entry is listed again by the hub's 410 or next
		// change; the others still resume.
		s.log.Warn("some stored pods cannot be read; resuming with the others", "err", err)
	}
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: rv}, Items: make([]corev1.Pod, 0, len(pods))}
	for _, p := range pods {
		list.Items = append(list.Items, *p)
	}
	return list, true
}

func (s *HubSource) Name() string { return "hub" }

func (s *HubSource) Run(ctx context.Context, notify func(types.UID)) error {
	uidOf := func(obj any) (types.UID, bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return "", false
		}
		return p.UID, true
	}
	changed := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && podutil.IsMirror(p) {
			// Not ours to run; the static source has the real pod.
			return
		}
		if uid, ok := uidOf(obj); ok {
			// Written again here (a no-op when unchanged) in case the
			// cache's re-list replaced the store between the transform
			// and the informer's own store.
			s.remember(obj)
			notify(uid)
		}
	}
	_, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    changed,
		UpdateFunc: func(_, obj any) { changed(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				s.forget(p)
				if !podutil.IsMirror(p) {
					notify(p.UID)
				}
			}
		},
	})
	if err != nil {
		return fmt.Errorf("hub pod source: %w", err)
	}
	s.informer.RunWithContext(ctx)
	return nil
}

// HasSynced is true once the informer holds a whole list and the hub has
// answered: a list resumed from the store is the cache source's to serve
// until then.
func (s *HubSource) HasSynced() bool { return s.lw.Answered() && s.informer.HasSynced() }

// LastSyncResourceVersion is the resourceVersion of the informer's latest
// list or watch event.
func (s *HubSource) LastSyncResourceVersion() string { return s.informer.LastSyncResourceVersion() }

// persist makes the source write every pod to store before the kubelet
// sees it. It must be called before Run.
func (s *HubSource) persist(store *localstore.Store, log *slog.Logger) error {
	s.store, s.log = store, log
	// The transform runs before the informer stores the object, so no
	// pod is acted on before it is on disk.
	return s.informer.SetTransform(func(obj any) (any, error) {
		s.remember(obj)
		return obj, nil
	})
}

func (s *HubSource) remember(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || s.store == nil {
		return
	}
	// Mirror pods are kept too: a resumed watch sends only what changed,
	// and a static pod's status goes to its mirror. The cache source
	// never runs them.
	if err := localstore.Put(s.store, localstore.Pods, p); err != nil {
		// The pod still runs; only a restart without the hub would miss it.
		s.log.Warn("could not record pod in the local store", "pod", p.Namespace+"/"+p.Name, "err", err)
		return
	}
	s.advance(p.ResourceVersion)
}

// advance records rv as the version a resumed watch starts from, once the
// store holds a whole list: a watch from there replays only what the
// store does not have yet.
func (s *HubSource) advance(rv string) {
	cur, err := s.store.ResourceVersion(localstore.Pods)
	if err != nil || cur == "" || rv == "" || !resume.NewerVersion(rv, cur) {
		return
	}
	if err := s.store.SetResourceVersion(localstore.Pods, rv); err != nil {
		s.log.Warn("could not record the pods' resourceVersion in the local store", "err", err)
	}
}

func (s *HubSource) forget(p *corev1.Pod) {
	if s.store == nil {
		return
	}
	if err := s.store.Delete(localstore.Pods, p.Namespace, p.Name); err != nil {
		s.log.Warn("could not remove pod from the local store", "pod", p.Namespace+"/"+p.Name, "err", err)
		return
	}
	s.advance(p.ResourceVersion)
}

// Get returns a pod the hub wants run here. Mirror pods are not among
// them: they stand for static pods, which the static source runs.
func (s *HubSource) Get(uid types.UID) (*corev1.Pod, bool) {
	p, ok := s.get(uid)
	if !ok || podutil.IsMirror(p) {
		return nil, false
	}
	return p, true
}

func (s *HubSource) get(uid types.UID) (*corev1.Pod, bool) {
	if !s.lw.Answered() {
		// What the store gave the informer is the cache source's to
		// serve until the hub has answered.
		return nil, false
	}
	objs, err := s.informer.GetIndexer().ByIndex(uidIndex, string(uid))
	if err != nil || len(objs) == 0 {
		return nil, false
	}
	return objs[0].(*corev1.Pod), true
}

func (s *HubSource) List() []*corev1.Pod {
	if !s.lw.Answered() {
		return nil
	}
	objs := s.informer.GetStore().List()
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p := o.(*corev1.Pod); !podutil.IsMirror(p) {
			out = append(out, p)
		}
	}
	return out
}

// all is every pod the informer holds, mirror pods included: what the
// store keeps.
func (s *HubSource) all() []*corev1.Pod {
	objs := s.informer.GetStore().List()
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*corev1.Pod))
	}
	return out
}

// mirrorOf returns the hub's mirror of a static pod: same namespace and
// name, marked as a mirror.
func (s *HubSource) mirrorOf(static *corev1.Pod) (*corev1.Pod, bool) {
	if !s.lw.Answered() {
		return nil, false
	}
	obj, ok, err := s.informer.GetStore().GetByKey(static.Namespace + "/" + static.Name)
	if err != nil || !ok {
		return nil, false
	}
	p := obj.(*corev1.Pod)
	return p, podutil.IsMirror(p)
}

// sources merges PodSources in priority order.
type sources []PodSource

func (ss sources) get(uid types.UID) (*corev1.Pod, bool) {
	for _, s := range ss {
		if p, ok := s.Get(uid); ok {
			return p, true
		}
	}
	return nil, false
}

func (ss sources) list() map[types.UID]*corev1.Pod {
	out := map[types.UID]*corev1.Pod{}
	for _, s := range ss {
		for _, p := range s.List() {
			if _, ok := out[p.UID]; !ok {
				out[p.UID] = p
			}
		}
	}
	return out
}

// synced reports whether every source has delivered its whole set, so
// that a pod none of them has is really not wanted. A source that cannot
// sync (the hub, while it is away) counts as synced when a source that
// stands in for it has.
func (ss sources) synced() bool {
	for _, s := range ss {
		if !s.HasSynced() && !ss.stoodInFor(s.Name()) {
			return false
		}
	}
	return true
}

// syncedFor reports whether the source named origin (every source, when
// origin is "") has synced, or a stand-in has for it.
func (ss sources) syncedFor(origin string) bool {
	if origin == "" {
		return ss.synced()
	}
	for _, s := range ss {
		if s.Name() == origin {
			return s.HasSynced() || ss.stoodInFor(origin)
		}
	}
	return ss.synced()
}

// standIn is a source that serves another's pods while that one has not
// synced.
type standIn interface {
	StandsInFor() string
}

func (ss sources) stoodInFor(name string) bool {
	for _, s := range ss {
		if si, ok := s.(standIn); ok && si.StandsInFor() == name && s.HasSynced() {
			return true
		}
	}
	return false
}

// origin names the source a pod comes from, "" when none has it.
func (ss sources) origin(uid types.UID) string {
	for _, s := range ss {
		if _, ok := s.Get(uid); ok {
			return s.Name()
		}
	}
	return ""
}

// waitSynced waits until every source has synced or ctx ends.
func (ss sources) waitSynced(ctx context.Context) bool {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !ss.synced() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}
