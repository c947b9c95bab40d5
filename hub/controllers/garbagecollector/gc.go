package garbagecollector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/internal/controlloop"
)

// Name is the loop's name in logs and leader election.
const Name = "garbagecollector"

// Finalizers the apiserver sets from DeleteOptions.propagationPolicy.
const (
	FinalizerOrphan     = metav1.FinalizerOrphanDependents
	FinalizerForeground = metav1.FinalizerDeleteDependents
)

const ownerIndex = "ownerUID"

// Options tune the collector.
type Options struct {
	// Resources to watch; default api.Resources() without events (Events
	// never own anything and are the most numerous objects).
	Resources []*api.Resource
	Logger    *slog.Logger
}

// Collector is the garbage collector.
type Collector struct {
	client    metadata.Interface
	log       *slog.Logger
	resources map[schema.GroupVersionResource]*api.Resource
	informers map[schema.GroupVersionResource]cache.SharedIndexInformer
	// deleteQ handles dependents (are their owners gone?) and owners being
	// deleted in the foreground (are their blocking dependents gone?).
	deleteQ *controlloop.Loop
	// orphanQ handles owners being deleted with the orphan finalizer.
	orphanQ *controlloop.Loop
}

// New registers a metadata informer for every resource with factory.
func New(client metadata.Interface, factory metadatainformer.SharedInformerFactory, opts Options) (*Collector, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	res := opts.Resources
	if res == nil {
		for _, r := range api.Resources() {
			if r.GVR.Resource != "events" {
				res = append(res, r)
			}
		}
	}
	g := &Collector{
		client:    client,
		log:       opts.Logger.With("controller", Name),
		resources: map[schema.GroupVersionResource]*api.Resource{},
		informers: map[schema.GroupVersionResource]cache.SharedIndexInformer{},
	}
	g.deleteQ = controlloop.New(Name+"-delete", g.attemptToDelete, controlloop.Options{Logger: opts.Logger})
	g.orphanQ = controlloop.New(Name+"-orphan", g.attemptToOrphan, controlloop.Options{Logger: opts.Logger})
	for _, r := range res {
		inf := factory.ForResource(r.GVR).Informer()
		if err := inf.AddIndexers(cache.Indexers{ownerIndex: indexByOwner}); err != nil {
			return nil, fmt.Errorf("%s informer: %w", r.GVR.Resource, err)
		}
		gvr := r.GVR
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { g.onChange(gvr, nil, obj) },
			UpdateFunc: func(old, cur any) { g.onChange(gvr, old, cur) },
			DeleteFunc: func(obj any) { g.onDelete(gvr, obj) },
		}); err != nil {
			return nil, fmt.Errorf("%s informer: %w", r.GVR.Resource, err)
		}
		g.resources[r.GVR] = r
		g.informers[r.GVR] = inf
		g.deleteQ.WaitFor(inf.HasSynced)
		g.orphanQ.WaitFor(inf.HasSynced)
	}
	return g, nil
}

func indexByOwner(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil
	}
	refs := m.GetOwnerReferences()
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		out = append(out, string(r.UID))
	}
	return out, nil
}

// Run runs workers for each queue until ctx ends.
func (g *Collector) Run(ctx context.Context, workers int) error {
	errc := make(chan error, 2)
	go func() { errc <- g.deleteQ.Run(ctx, workers) }()
	go func() { errc <- g.orphanQ.Run(ctx, workers) }()
	return errors.Join(<-errc, <-errc)
}

// ---- keys ----

type ref struct {
	gvr       schema.GroupVersionResource
	namespace string
	name      string
}

func (r ref) key() string {
	return strings.Join([]string{r.gvr.Group, r.gvr.Version, r.gvr.Resource, r.namespace, r.name}, "|")
}

func parseKey(k string) (ref, error) {
	p := strings.Split(k, "|")
	if len(p) != 5 {
		return ref{}, fmt.Errorf("garbage collector key %q: want group|version|resource|namespace|name", k)
	}
	return ref{gvr: schema.GroupVersionResource{Group: p[0], Version: p[1], Resource: p[2]}, namespace: p[3], name: p[4]}, nil
}

func refOf(gvr schema.GroupVersionResource, m metav1.Object) ref {
	return ref{gvr: gvr, namespace: m.GetNamespace(), name: m.GetName()}
}

// ---- events ----

func accessor(obj any) metav1.Object {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	return m
}

func (g *Collector) onChange(gvr schema.GroupVersionResource, oldObj, obj any) {
	m := accessor(obj)
	if m == nil {
		return
	}
	var old metav1.Object
	if oldObj != nil {
		old = accessor(oldObj)
	}
	r := refOf(gvr, m)
	deleting := m.GetDeletionTimestamp() != nil
	if deleting && slices.Contains(m.GetFinalizers(), FinalizerOrphan) {
		g.orphanQ.EnqueueKey(r.key())
	}
	if deleting && slices.Contains(m.GetFinalizers(), FinalizerForeground) {
		g.deleteQ.EnqueueKey(r.key())
		// Its dependents must go first: look at each of them now.
		g.enqueueDependents(m.GetUID())
	}
	// Owner references are judged when they appear or change; the
	// informer's initial list brings every object through here once.
	if len(m.GetOwnerReferences()) > 0 && (old == nil || !sameRefs(old.GetOwnerReferences(), m.GetOwnerReferences()) ||
		(old.GetDeletionTimestamp() == nil) != deleting) {
		g.deleteQ.EnqueueKey(r.key())
	}
	g.enqueueForegroundOwners(m)
}

func (g *Collector) onDelete(_ schema.GroupVersionResource, obj any) {
	m := accessor(obj)
	if m == nil {
		return
	}
	g.enqueueDependents(m.GetUID())
	g.enqueueForegroundOwners(m)
}

// enqueueForegroundOwners wakes owners deleting in the foreground when one
// of their dependents changes or goes: they may be free to go now.
func (g *Collector) enqueueForegroundOwners(m metav1.Object) {
	for _, or := range m.GetOwnerReferences() {
		owner, r, ok := g.cachedOwner(m.GetNamespace(), or)
		if ok && owner != nil && owner.GetDeletionTimestamp() != nil && slices.Contains(owner.GetFinalizers(), FinalizerForeground) {
			g.deleteQ.EnqueueKey(r.key())
		}
	}
}

func (g *Collector) enqueueDependents(uid types.UID) {
	for gvr, inf := range g.informers {
		deps, err := inf.GetIndexer().ByIndex(ownerIndex, string(uid))
		if err != nil {
			continue
		}
		for _, d := range deps {
			if m := accessor(d); m != nil {
				g.deleteQ.EnqueueKey(refOf(gvr, m).key())
			}
		}
	}
}

func sameRefs(a, b []metav1.OwnerReference) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].UID != b[i].UID {
			return false
		}
	}
	return true
}

// ---- lookups ----

func (g *Collector) cached(r ref) metav1.Object {
	inf, ok := g.informers[r.gvr]
	if !ok {
		return nil
	}
	obj, exists, err := inf.GetIndexer().GetByKey(controlloop.NameKey(r.namespace, r.name))
	if err != nil || !exists {
		return nil
	}
	return accessor(obj)
}

// ownerRef resolves an ownerReference of an object in namespace ns to the
// owner's place. ok is false for kinds this hub does not serve.
func (g *Collector) ownerRef(ns string, or metav1.OwnerReference) (ref, bool) {
	gv, err := schema.ParseGroupVersion(or.APIVersion)
	if err != nil {
		return ref{}, false
	}
	res, ok := api.ResourceForKind(gv.WithKind(or.Kind))
	if !ok {
		return ref{}, false
	}
	r := ref{gvr: res.GVR, name: or.Name}
	if res.Namespaced {
		r.namespace = ns
	}
	return r, true
}

// cachedOwner returns the cached owner (nil when absent from the cache or
// a different object of the same name).
func (g *Collector) cachedOwner(ns string, or metav1.OwnerReference) (metav1.Object, ref, bool) {
	r, ok := g.ownerRef(ns, or)
	if !ok {
		return nil, r, false
	}
	o := g.cached(r)
	if o == nil || o.GetUID() != or.UID {
		return nil, r, true
	}
	return o, r, true
}

// liveOwner reads the owner from the API: the cache may not have seen it
// yet, and deleting a dependent by mistake cannot be undone.
func (g *Collector) liveOwner(ctx context.Context, r ref, uid types.UID) (metav1.Object, error) {
	o, err := g.client.Resource(r.gvr).Namespace(r.namespace).Get(ctx, r.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read owner %s %s/%s: %w", r.gvr.Resource, r.namespace, r.name, err)
	}
	if o.UID != uid {
		return nil, nil
	}
	return o, nil
}

func (g *Collector) dependents(uid types.UID) []ref {
	var out []ref
	for gvr, inf := range g.informers {
		deps, err := inf.GetIndexer().ByIndex(ownerIndex, string(uid))
		if err != nil {
			continue
		}
		for _, d := range deps {
			if m := accessor(d); m != nil {
				out = append(out, refOf(gvr, m))
			}
		}
	}
	return out
}

// ---- attemptToDelete ----

func (g *Collector) attemptToDelete(ctx context.Context, key string) error {
	r, err := parseKey(key)
	if err != nil {
		g.log.Error("dropping bad key", "err", err)
		return nil
	}
	obj := g.cached(r)
	if obj == nil {
		return nil
	}
	if obj.GetDeletionTimestamp() != nil {
		if slices.Contains(obj.GetFinalizers(), FinalizerForeground) {
			return g.processDeletingDependents(ctx, r, obj)
		}
		return nil // already going; other finalizers are not ours
	}
	refs := obj.GetOwnerReferences()
	if len(refs) == 0 {
		return nil
	}
	var solid, dangling, waiting []metav1.OwnerReference
	for _, or := range refs {
		owner, oref, ok := g.cachedOwner(r.namespace, or)
		if !ok {
			// An owner of a kind this hub does not serve cannot be checked:
			// never delete on its account.
			solid = append(solid, or)
			continue
		}
		if owner == nil {
			owner, err = g.liveOwner(ctx, oref, or.UID)
			if err != nil {
				return err
			}
		}
		switch {
		case owner == nil:
			dangling = append(dangling, or)
		case owner.GetDeletionTimestamp() != nil && slices.Contains(owner.GetFinalizers(), FinalizerForeground):
			waiting = append(waiting, or)
		default:
			solid = append(solid, or)
		}
	}
	switch {
	case len(solid) > 0:
		if len(dangling)+len(waiting) == 0 {
			return nil
		}
		// Keep the object for its living owner; drop the references to
		// the dead or dying ones.
		var uids []types.UID
		for _, or := range append(dangling, waiting...) {
			uids = append(uids, or.UID)
		}
		return g.removeOwnerRefs(ctx, r, obj.GetUID(), uids)
	case len(waiting) > 0 && len(g.dependents(obj.GetUID())) > 0:
		// An owner waits for us and we have dependents: delete in the
		// foreground so the chain of blocking goes all the way down.
		return g.delete(ctx, r, obj.GetUID(), metav1.DeletePropagationForeground)
	default:
		policy := metav1.DeletePropagationBackground
		if slices.Contains(obj.GetFinalizers(), FinalizerOrphan) {
			policy = metav1.DeletePropagationOrphan
		}
		if slices.Contains(obj.GetFinalizers(), FinalizerForeground) {
			policy = metav1.DeletePropagationForeground
		}
		return g.delete(ctx, r, obj.GetUID(), policy)
	}
}

// processDeletingDependents removes the foreground finalizer once no
// dependent blocks the owner's deletion any more.
func (g *Collector) processDeletingDependents(ctx context.Context, r ref, owner metav1.Object) error {
	blocking := 0
	for _, d := range g.dependents(owner.GetUID()) {
		dep := g.cached(d)
		if dep == nil {
			continue
		}
		for _, or := range dep.GetOwnerReferences() {
			if or.UID == owner.GetUID() && or.BlockOwnerDeletion != nil && *or.BlockOwnerDeletion {
				blocking++
				// Make sure it is on its way (its own sync decides how).
				g.deleteQ.EnqueueKey(d.key())
			}
		}
	}
	if blocking > 0 {
		return nil // their deletion events bring us back
	}
	return g.removeFinalizer(ctx, r, owner, FinalizerForeground)
}

func (g *Collector) delete(ctx context.Context, r ref, uid types.UID, policy metav1.DeletionPropagation) error {
	g.log.Debug("deleting", "resource", r.gvr.Resource, "namespace", r.namespace, "name", r.name, "propagation", policy)
	err := g.client.Resource(r.gvr).Namespace(r.namespace).Delete(ctx, r.name, metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &uid},
		PropagationPolicy: &policy,
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete %s %s/%s: %w", r.gvr.Resource, r.namespace, r.name, err)
	}
	return nil
}

// removeOwnerRefs drops the references to uids with a strategic merge
// patch; the uid precondition keeps it from touching a recreated object.
func (g *Collector) removeOwnerRefs(ctx context.Context, r ref, uid types.UID, uids []types.UID) error {
	dels := make([]map[string]any, len(uids))
	for i, u := range uids {
		dels[i] = map[string]any{"$patch": "delete", "uid": u}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": dels, "uid": uid}})
	if err != nil {
		return err
	}
	_, err = g.client.Resource(r.gvr).Namespace(r.namespace).Patch(ctx, r.name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("remove ownerReferences from %s %s/%s: %w", r.gvr.Resource, r.namespace, r.name, err)
	}
	return nil
}

// removeFinalizer writes the finalizer list without f, guarded by the
// resourceVersion it was computed from: a concurrent change makes it a
// conflict and a retry, never a lost finalizer.
func (g *Collector) removeFinalizer(ctx context.Context, r ref, obj metav1.Object, f string) error {
	var keep []string
	for _, x := range obj.GetFinalizers() {
		if x != f {
			keep = append(keep, x)
		}
	}
	if keep == nil {
		keep = []string{}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"finalizers": keep, "resourceVersion": obj.GetResourceVersion(), "uid": obj.GetUID(),
	}})
	if err != nil {
		return err
	}
	_, err = g.client.Resource(r.gvr).Namespace(r.namespace).Patch(ctx, r.name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove finalizer %s from %s %s/%s: %w", f, r.gvr.Resource, r.namespace, r.name, err)
	}
	return nil
}

// ---- attemptToOrphan ----

func (g *Collector) attemptToOrphan(ctx context.Context, key string) error {
	r, err := parseKey(key)
	if err != nil {
		g.log.Error("dropping bad key", "err", err)
		return nil
	}
	owner := g.cached(r)
	if owner == nil || owner.GetDeletionTimestamp() == nil || !slices.Contains(owner.GetFinalizers(), FinalizerOrphan) {
		return nil
	}
	var errs []error
	for _, d := range g.dependents(owner.GetUID()) {
		dep := g.cached(d)
		if dep == nil {
			continue
		}
		if err := g.removeOwnerRefs(ctx, d, dep.GetUID(), []types.UID{owner.GetUID()}); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return g.removeFinalizer(ctx, r, owner, FinalizerOrphan)
}
