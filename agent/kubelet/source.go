package kubelet

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
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

// HubSource is the pods bound to this node on the hub, through an
// informer with the field selector spec.nodeName=<node>.
type HubSource struct {
	informer cache.SharedIndexInformer
}

var _ PodSource = (*HubSource)(nil)

// NewHubSource returns the hub's pods bound to node.
func NewHubSource(client kubernetes.Interface, node string) *HubSource {
	sel := fields.OneTermEqualSelector("spec.nodeName", node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{
		uidIndex: func(obj any) ([]string, error) {
			if p, ok := obj.(*corev1.Pod); ok {
				return []string{string(p.UID)}, nil
			}
			return nil, nil
		},
	})
	return &HubSource{informer: inf}
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
	_, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if uid, ok := uidOf(obj); ok {
				notify(uid)
			}
		},
		UpdateFunc: func(_, obj any) {
			if uid, ok := uidOf(obj); ok {
				notify(uid)
			}
		},
		DeleteFunc: func(obj any) {
			if uid, ok := uidOf(obj); ok {
				notify(uid)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("hub pod source: %w", err)
	}
	s.informer.RunWithContext(ctx)
	return nil
}

func (s *HubSource) HasSynced() bool { return s.informer.HasSynced() }

func (s *HubSource) Get(uid types.UID) (*corev1.Pod, bool) {
	objs, err := s.informer.GetIndexer().ByIndex(uidIndex, string(uid))
	if err != nil || len(objs) == 0 {
		return nil, false
	}
	return objs[0].(*corev1.Pod), true
}

func (s *HubSource) List() []*corev1.Pod {
	objs := s.informer.GetStore().List()
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*corev1.Pod))
	}
	return out
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

func (ss sources) synced() bool {
	for _, s := range ss {
		if !s.HasSynced() {
			return false
		}
	}
	return true
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
