package apiserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub/store"
)

// UnreadableChecker is implemented by a store whose values may be
// unreadable one by one: hub/secrets, for a Secret sealed with a key the
// hub does not have, or damaged. Its List and Watch hand such a value
// over as it is stored instead of failing the whole list or watch, and
// Unreadable says why it cannot be read (nil when it can). Its Get fails
// with that error and still returns the KV with its revisions; its Delete
// removes such a value.
//
// The API server keeps such objects aside: a read of one answers 500 with
// that error, lists and watches leave it out (a watcher that had it sees
// it deleted), a Warning Event is written about it once per stored value,
// and it can be deleted (alone, or with its namespace). The hub stays
// ready.
type UnreadableChecker interface {
	Unreadable(kv store.KV) error
}

// unreadableObject is an object in the store the cache cannot read.
type unreadableObject struct {
	namespace, name string
	rev             int64
	err             error
}

// unreadableReport asks for the Event about an unreadable object.
type unreadableReport struct {
	res *api.Resource
	unreadableObject
}

// reportQueue bounds the Events waiting to be written; past it, the
// objects are still logged.
const reportQueue = 256

func (c *watchCache) checkUnreadable(kv store.KV) error {
	u, ok := c.store.(UnreadableChecker)
	if !ok || kv.Value == nil {
		return nil
	}
	return u.Unreadable(kv)
}

func addUnreadable(m map[*api.Resource]map[string]unreadableObject, res *api.Resource, u unreadableObject) {
	if m[res] == nil {
		m[res] = map[string]unreadableObject{}
	}
	m[res][cacheKey(u.namespace, u.name)] = u
}

// readError is why the object cannot be read, or nil.
func (c *watchCache) readError(res *api.Resource, namespace, name string) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if u, ok := c.unreadable[res][cacheKey(namespace, name)]; ok {
		return u.err
	}
	return nil
}

// unreadableIn names the unreadable objects of res in a namespace.
func (c *watchCache) unreadableIn(res *api.Resource, namespace string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var names []string
	for _, u := range c.unreadable[res] {
		if u.namespace == namespace {
			names = append(names, u.name)
		}
	}
	return names
}

// setUnreadableLocked takes the unreadable objects of a (re)load and
// reports those not known before at the same revision.
func (c *watchCache) setUnreadableLocked(m map[*api.Resource]map[string]unreadableObject) {
	for res, objs := range m {
		for key, u := range objs {
			if old, ok := c.unreadable[res][key]; !ok || old.rev != u.rev {
				c.reportLocked(res, u)
			}
		}
	}
	c.unreadable = m
}

// applyUnreadableLocked applies a store event whose value cannot be read.
// A watcher that had the object sees it deleted, as a list no longer
// shows it.
func (c *watchCache) applyUnreadableLocked(ev store.Event, res *api.Resource, namespace, name string, err error) {
	key, rev := cacheKey(namespace, name), ev.KV.ModRevision
	if ev.Type == store.EventDelete {
		delete(c.unreadable[res], key)
	} else {
		u := unreadableObject{namespace: namespace, name: name, rev: rev, err: err}
		addUnreadable(c.unreadable, res, u)
		c.reportLocked(res, u)
	}
	prev := c.objects[res][key]
	if prev == nil {
		return
	}
	delete(c.objects[res], key)
	obj := prev.obj.DeepCopyObject()
	m, _ := meta.Accessor(obj)
	m.SetResourceVersion(strconv.FormatInt(rev, 10))
	cur := &cachedObject{obj: obj, labels: labels.Set(m.GetLabels()), fields: prev.fields, rev: rev}
	ce := &cacheEvent{typ: watch.Deleted, res: res, key: key, cur: cur, prev: prev, rev: rev}
	c.pushLocked(ce)
	c.dispatchLocked(ce)
}

func (c *watchCache) reportLocked(res *api.Resource, u unreadableObject) {
	c.log.Error("an object in the store cannot be read: reads of it fail until it is repaired or deleted",
		"resource", res.GVR.Resource, "namespace", u.namespace, "name", u.name, "rev", u.rev, "err", u.err)
	select {
	case c.reports <- unreadableReport{res: res, unreadableObject: u}:
	default:
	}
}

var eventResource, _ = api.ResourceForKind(corev1.SchemeGroupVersion.WithKind("Event"))

// recordUnreadable writes the Events about unreadable objects, once the
// server is ready, until ctx ends.
func (s *Server) recordUnreadable(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-s.cache.reports:
			if err := s.writeUnreadableEvent(ctx, r); err != nil && ctx.Err() == nil {
				s.log.Warn("writing the Event about an unreadable object", "resource", r.res.GVR.Resource,
					"namespace", r.namespace, "name", r.name, "err", err)
			}
		}
	}
}

// writeUnreadableEvent writes one Warning Event per stored value: its name
// comes from the object's name and revision, so a reload, a restart or
// another hub finds it already written.
func (s *Server) writeUnreadableEvent(ctx context.Context, r unreadableReport) error {
	reason := "Unreadable"
	var rs interface{ Reason() string }
	if errors.As(r.err, &rs) {
		reason = rs.Reason()
	}
	ns := r.namespace
	if !r.res.Namespaced {
		ns = metav1.NamespaceDefault
	}
	suffix := "." + strconv.FormatInt(r.rev, 16)
	name := r.name
	if len(name)+len(suffix) > 253 {
		name = name[:253-len(suffix)]
	}
	now := metav1.NewTime(s.now().UTC().Truncate(1e9))
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: name + suffix, Namespace: ns},
		InvolvedObject: corev1.ObjectReference{Kind: r.res.Kind, APIVersion: r.res.GVR.GroupVersion().String(),
			Namespace: r.namespace, Name: r.name, ResourceVersion: strconv.FormatInt(r.rev, 10)},
		Reason: reason, Message: r.err.Error(), Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "flotilla-hub"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	_, _, err := s.create(ctx, eventResource, ev, false, owner{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// storedUnreadable says whether a failed Get met a value the store cannot
// read, which a delete may still remove.
func (s *Server) storedUnreadable(kv store.KV, err error) bool {
	u, ok := s.store.(UnreadableChecker)
	return ok && err != nil && kv.Value != nil && !errors.Is(err, store.ErrNotFound) && u.Unreadable(kv) != nil
}

// deleteUnreadable removes an object whose stored value cannot be read:
// at once, since no finalizer or grace period of it can be read; the
// answer is the object's name and namespace.
func (s *Server) deleteUnreadable(ctx context.Context, res *api.Resource, ns, name string, kv store.KV, opts *metav1.DeleteOptions) (runtime.Object, []byte, error) {
	obj := res.New()
	m, _ := meta.Accessor(obj)
	m.SetNamespace(ns)
	m.SetName(name)
	m.SetResourceVersion(strconv.FormatInt(kv.ModRevision, 10))
	if p := opts.Preconditions; p != nil {
		if p.UID != nil {
			return nil, nil, apierrors.NewConflict(res.GVR.GroupResource(), name, errors.New("the stored object cannot be read, so its UID cannot be checked against the precondition; delete it without one"))
		}
		if p.ResourceVersion != nil && *p.ResourceVersion != m.GetResourceVersion() {
			return nil, nil, apierrors.NewConflict(res.GVR.GroupResource(), name, fmt.Errorf("the ResourceVersion in the precondition (%s) does not match the ResourceVersion in record (%s); the object might have been modified", *p.ResourceVersion, m.GetResourceVersion()))
		}
	}
	if err := s.admit(ctx, nil, obj); err != nil {
		return nil, nil, err
	}
	if len(opts.DryRun) > 0 {
		return obj, mustEncode(res, obj), nil
	}
	_, drev, err := s.store.Delete(ctx, kv.Key, kv.ModRevision)
	if err != nil {
		return nil, nil, toStatusError(err, res, name)
	}
	s.log.Warn("deleted an object whose stored value could not be read", "resource", res.GVR.Resource, "namespace", ns, "name", name)
	m.SetResourceVersion(strconv.FormatInt(drev, 10))
	return obj, mustEncode(res, obj), nil
}
