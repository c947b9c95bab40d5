package apiserver

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/defaults"
	"flotilla.dev/flotilla/api/validation"
	"flotilla.dev/flotilla/hub/store"
)

// Finalizers the hub itself understands.
const (
	FinalizerOrphan     = metav1.FinalizerOrphanDependents
	FinalizerForeground = metav1.FinalizerDeleteDependents
)

func (s *Server) validationOptions() validation.Options {
	return validation.Options{AllowTagImages: s.cfg.AllowTagImages, Images: s.cfg.Images}
}

func invalid(res *api.Resource, name string, errs field.ErrorList) error {
	return apierrors.NewInvalid(res.GVK().GroupKind(), name, errs)
}

// create admits and stores a new object. It returns the stored object
// (with its resourceVersion) and its encoding.
// o records who created it in managedFields; the zero owner keeps the
// managedFields obj has (an apply computed them; the hub's own objects have
// none).
func (s *Server) create(ctx context.Context, res *api.Resource, obj runtime.Object, dryRun bool, o owner) (runtime.Object, []byte, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil, badRequest("the object has no metadata: %v", err)
	}
	if m.GetResourceVersion() != "" {
		return nil, nil, badRequest("resourceVersion should not be set on objects to be created")
	}
	if m.GetName() == "" && m.GetGenerateName() != "" {
		m.SetName(generateName(m.GetGenerateName()))
	}
	now := metav1.NewTime(s.now().UTC().Truncate(time.Second))
	m.SetUID(types.UID(uuid.NewUUID()))
	m.SetCreationTimestamp(now)
	m.SetDeletionTimestamp(nil)
	m.SetDeletionGracePeriodSeconds(nil)
	m.SetSelfLink("")
	m.SetGeneration(1)
	prepareCreate(res, obj)
	defaults.Default(obj)
	if err := s.admitPriority(ctx, obj, nil); err != nil {
		return nil, nil, err
	}
	obj = s.fields.record(res, "", nil, obj, o)
	m, _ = meta.Accessor(obj)
	if errs := validation.ValidateCreate(obj, s.validationOptions()); len(errs) > 0 {
		return nil, nil, invalid(res, m.GetName(), errs)
	}
	if res.Namespaced {
		if err := s.checkNamespace(ctx, m.GetNamespace()); err != nil {
			return nil, nil, err
		}
	}
	if err := s.admit(s.withLookup(ctx), obj, nil); err != nil {
		return nil, nil, err
	}
	if err := s.admitPodSecurity(ctx, obj, nil); err != nil {
		return nil, nil, err
	}
	release, err := s.admitCreate(ctx, res, obj, dryRun)
	if err != nil {
		return nil, nil, err
	}
	data, err := encodeObject(res, obj)
	if err != nil {
		release()
		return nil, nil, apierrors.NewInternalError(err)
	}
	if len(data) > api.MaxObjectSize && o.track {
		data = dropManagedFields(res, obj, data)
	}
	if len(data) > api.MaxObjectSize {
		release()
		return nil, nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the %s is %d bytes; objects are limited to %d bytes", res.Kind, len(data), api.MaxObjectSize))
	}
	if dryRun {
		release()
		return obj, data, nil
	}
	rev, err := s.store.Create(ctx, objectKey(res, m.GetNamespace(), m.GetName()), data)
	if err != nil {
		release()
		return nil, nil, toStatusError(err, res, m.GetName())
	}
	m.SetResourceVersion(strconv.FormatInt(rev, 10))
	out, err := encodeObject(res, obj)
	return obj, out, err
}

// prepareCreate resets what a client may not set on creation.
func prepareCreate(res *api.Resource, obj runtime.Object) {
	switch o := obj.(type) {
	case *corev1.Pod:
		o.Status = corev1.PodStatus{Phase: corev1.PodPending}
		if o.Spec.NodeName != "" {
			// A pod created already bound (a mirror pod, or a client that
			// schedules for itself) is scheduled by definition.
			o.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		}
	case *corev1.Node:
		// A device registers its Node with status; keep it.
	case *corev1.Namespace:
		o.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
	default:
		if res.HasStatus {
			setStatus(obj, nil)
		}
	}
}

func generateName(base string) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	if len(base) > 58 {
		base = base[:58]
	}
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return base + string(b)
}

func (s *Server) checkNamespace(ctx context.Context, ns string) error {
	kv, err := s.store.Get(ctx, objectKey(nsResource, "", ns))
	if errors.Is(err, store.ErrNotFound) {
		return apierrors.NewNotFound(nsResource.GVR.GroupResource(), ns)
	}
	if err != nil {
		return toStatusError(err, nsResource, ns)
	}
	obj, err := decodeStored(nsResource, kv.Value)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if obj.(*corev1.Namespace).DeletionTimestamp != nil {
		return apierrors.NewForbidden(nsResource.GVR.GroupResource(), ns,
			fmt.Errorf("unable to create new content in namespace %s because it is being terminated", ns))
	}
	return nil
}

var nsResource, _ = api.ResourceForKind(corev1.SchemeGroupVersion.WithKind("Namespace"))

// updateFunc computes the desired object from the current one. cur is a
// private deep copy the function may change and return.
type updateFunc func(cur runtime.Object) (runtime.Object, error)

// update reads the current object, applies fn, admits the result and
// writes it with compare-and-swap, retrying when another writer got there
// first (fn decides whether a stale resourceVersion is a conflict). The
// encoding it returns may be nil (writeObject encodes the object).
// subresource "status" writes only status; "" everything but status;
// "internal" both (bindings and the hub's own changes). o records who
// wrote it in managedFields, as create's.
func (s *Server) update(ctx context.Context, res *api.Resource, ns, name, subresource string, dryRun bool, o owner, fn updateFunc) (runtime.Object, []byte, bool, error) {
	key := objectKey(res, ns, name)
	for attempt := 0; ; attempt++ {
		kv, err := s.store.Get(ctx, key)
		if errors.Is(err, store.ErrNotFound) {
			if res.Kind == "Event" && subresource == "" {
				// Events may be created with PUT, as kube-apiserver allows.
				obj, err := fn(nil)
				if err != nil {
					return nil, nil, false, err
				}
				out, raw, err := s.create(ctx, res, obj, dryRun, o)
				return out, raw, true, err
			}
			return nil, nil, false, apierrors.NewNotFound(res.GVR.GroupResource(), name)
		}
		if err != nil {
			return nil, nil, false, toStatusError(err, res, name)
		}
		cur, err := s.current(res, ns, name, kv)
		if err != nil {
			return nil, nil, false, apierrors.NewInternalError(err)
		}
		obj, err := fn(cur.DeepCopyObject())
		if err != nil {
			return nil, nil, false, err
		}
		obj, err = s.prepareUpdate(res, subresource, obj, cur)
		if err != nil {
			return nil, nil, false, err
		}
		if subresource != "internal" {
			// Recorded from the object as it will be stored (defaulted,
			// status split off), so that only the writer's real changes
			// count as its own.
			obj = s.fields.record(res, subresource, cur, obj, o)
		}
		if err := s.admit(s.withLookup(ctx), obj, cur); err != nil {
			return nil, nil, false, err
		}
		if err := s.admitPriority(ctx, obj, cur); err != nil {
			return nil, nil, false, err
		}
		if subresource == "" {
			if err := s.admitPodSecurity(ctx, obj, cur); err != nil {
				return nil, nil, false, err
			}
		}
		m, _ := meta.Accessor(obj)
		if len(m.GetFinalizers()) == 0 && m.GetDeletionTimestamp() != nil && (m.GetDeletionGracePeriodSeconds() == nil || *m.GetDeletionGracePeriodSeconds() == 0) {
			// The last finalizer is gone: the deletion completes now.
			if dryRun {
				return obj, mustEncode(res, obj), false, nil
			}
			out, raw, err := s.finishDelete(ctx, res, ns, name, kv.ModRevision)
			if errors.Is(err, store.ErrConflict) && attempt < 100 {
				continue
			}
			return out, raw, false, err
		}
		if apiequality.Semantic.DeepEqual(obj, cur) {
			// Nothing changed: no write, no event, the same resourceVersion.
			return cur, nil, false, nil
		}
		data, err := encodeObject(res, obj)
		if err != nil {
			return nil, nil, false, apierrors.NewInternalError(err)
		}
		if len(data) > api.MaxObjectSize && o.track {
			data = dropManagedFields(res, obj, data)
		}
		if len(data) > api.MaxObjectSize {
			return nil, nil, false, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the %s is %d bytes; objects are limited to %d bytes", res.Kind, len(data), api.MaxObjectSize))
		}
		release, err := s.admitUpdate(ctx, res, obj, cur, dryRun)
		if err != nil {
			return nil, nil, false, err
		}
		if dryRun {
			release(false)
			return obj, data, false, nil
		}
		rev, err := s.store.Update(ctx, key, data, kv.ModRevision)
		if errors.Is(err, store.ErrConflict) && attempt < 100 {
			release(false)
			continue
		}
		if err != nil {
			release(false)
			return nil, nil, false, toStatusError(err, res, name)
		}
		release(true)
		m.SetResourceVersion(strconv.FormatInt(rev, 10))
		// Encoded when answered, in what the client asked for: the
		// agents ask for protobuf.
		return obj, nil, false, nil
	}
}

// current decodes the stored object kv, with its resourceVersion. The
// watch cache has usually decoded it already: its copy at the same
// revision is the same object, and copying it is cheaper than decoding.
func (s *Server) current(res *api.Resource, ns, name string, kv store.KV) (runtime.Object, error) {
	if co := s.cache.get(res, ns, name); co != nil && co.rev == kv.ModRevision {
		return co.obj.DeepCopyObject(), nil
	}
	cur, err := decodeStored(res, kv.Value)
	if err != nil {
		return nil, err
	}
	m, _ := meta.Accessor(cur)
	m.SetResourceVersion(strconv.FormatInt(kv.ModRevision, 10))
	return cur, nil
}

// dropManagedFields encodes obj without its managedFields when they alone
// make it larger than an object may be, as kube-apiserver retries such an
// update or create: the write matters more than the record of who made
// it. An apply keeps them (its ownership is what it asked for) and is
// refused as too large instead.
func dropManagedFields(res *api.Resource, obj runtime.Object, data []byte) []byte {
	m, _ := meta.Accessor(obj)
	if len(m.GetManagedFields()) == 0 {
		return data
	}
	mf := m.GetManagedFields()
	m.SetManagedFields(nil)
	out, err := encodeObject(res, obj)
	if err != nil || len(out) > api.MaxObjectSize {
		m.SetManagedFields(mf)
		return data
	}
	return out
}

func mustEncode(res *api.Resource, obj runtime.Object) []byte {
	b, err := encodeObject(res, obj)
	if err != nil {
		panic(fmt.Sprintf("encoding a %s that was just decoded: %v", res.Kind, err))
	}
	return b
}

// prepareUpdate keeps what a client may not change, splits spec from
// status, bumps the generation on spec changes, defaults and validates.
func (s *Server) prepareUpdate(res *api.Resource, subresource string, obj, cur runtime.Object) (runtime.Object, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, badRequest("the object has no metadata: %v", err)
	}
	cm, _ := meta.Accessor(cur)
	if m.GetUID() != "" && m.GetUID() != cm.GetUID() {
		return nil, apierrors.NewConflict(res.GVR.GroupResource(), cm.GetName(),
			fmt.Errorf("the object's uid %s does not match the stored object's %s: it was deleted and created again", m.GetUID(), cm.GetUID()))
	}
	switch subresource {
	case "status":
		// Only status changes; everything else is the stored object's.
		next := cur.DeepCopyObject()
		setStatus(next, getStatus(obj))
		mf := m.GetManagedFields()
		obj = next
		m, _ = meta.Accessor(obj)
		m.SetManagedFields(mf)
	case "":
		if res.HasStatus {
			setStatus(obj, getStatus(cur))
		}
	}
	m.SetUID(cm.GetUID())
	m.SetName(cm.GetName())
	m.SetNamespace(cm.GetNamespace())
	m.SetCreationTimestamp(cm.GetCreationTimestamp())
	m.SetDeletionTimestamp(cm.GetDeletionTimestamp())
	m.SetDeletionGracePeriodSeconds(cm.GetDeletionGracePeriodSeconds())
	m.SetSelfLink("")
	m.SetResourceVersion(cm.GetResourceVersion())
	m.SetGeneration(cm.GetGeneration())
	if cm.GetDeletionTimestamp() != nil {
		old := map[string]bool{}
		for _, f := range cm.GetFinalizers() {
			old[f] = true
		}
		for _, f := range m.GetFinalizers() {
			if !old[f] {
				return nil, apierrors.NewForbidden(res.GVR.GroupResource(), cm.GetName(),
					fmt.Errorf("no new finalizers can be added if the object is being deleted, found new finalizer %q", f))
			}
		}
	}
	defaults.DefaultUpdate(obj, cur)
	if specChanged(obj, cur) {
		m.SetGeneration(cm.GetGeneration() + 1)
	}
	if subresource == "internal" {
		// The hub's own changes (bindings) may touch fields clients may not.
		return obj, nil
	}
	validate := validation.ValidateUpdate
	if subresource == "status" {
		validate = func(obj, old runtime.Object, _ validation.Options) field.ErrorList {
			return validation.ValidateStatusUpdate(obj, old)
		}
	}
	if errs := validate(obj, cur, s.validationOptions()); len(errs) > 0 {
		return nil, invalid(res, cm.GetName(), errs)
	}
	return obj, nil
}

// getStatus and setStatus reach the Status field every kind with a status
// subresource has.
func getStatus(obj runtime.Object) any {
	f := reflect.ValueOf(obj).Elem().FieldByName("Status")
	if !f.IsValid() {
		return nil
	}
	return f.Interface()
}

func setStatus(obj runtime.Object, status any) {
	f := reflect.ValueOf(obj).Elem().FieldByName("Status")
	if !f.IsValid() || !f.CanSet() {
		return
	}
	if status == nil {
		f.Set(reflect.Zero(f.Type()))
		return
	}
	f.Set(reflect.ValueOf(status))
}

// specChanged compares everything but metadata and status: what the
// generation counts.
func specChanged(a, b runtime.Object) bool {
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	t := va.Type()
	for i := 0; i < t.NumField(); i++ {
		switch t.Field(i).Name {
		case "TypeMeta", "ObjectMeta", "Status":
			continue
		}
		if !apiequality.Semantic.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			return true
		}
	}
	return false
}

// delete starts or completes the deletion of an object. It returns the
// object as it now is (marked for deletion, or as it was when removed).
func (s *Server) delete(ctx context.Context, res *api.Resource, ns, name string, opts *metav1.DeleteOptions) (runtime.Object, []byte, error) {
	if res == nsResource {
		switch name {
		case api.NamespaceDefault, api.NamespaceNodeLease, api.NamespaceSystem:
			return nil, nil, apierrors.NewForbidden(res.GVR.GroupResource(), name, errors.New("this namespace may not be deleted"))
		}
	}
	dryRun := len(opts.DryRun) > 0
	key := objectKey(res, ns, name)
	for attempt := 0; attempt < 100; attempt++ {
		kv, err := s.store.Get(ctx, key)
		if s.storedUnreadable(kv, err) {
			return s.deleteUnreadable(ctx, res, ns, name, kv, opts)
		}
		if err != nil {
			return nil, nil, toStatusError(err, res, name)
		}
		cur, err := decodeStored(res, kv.Value)
		if err != nil {
			return nil, nil, apierrors.NewInternalError(err)
		}
		m, _ := meta.Accessor(cur)
		m.SetResourceVersion(strconv.FormatInt(kv.ModRevision, 10))
		if err := s.admit(s.withLookup(ctx), nil, cur); err != nil {
			return nil, nil, err
		}
		if p := opts.Preconditions; p != nil {
			if p.UID != nil && *p.UID != m.GetUID() {
				return nil, nil, apierrors.NewConflict(res.GVR.GroupResource(), name, fmt.Errorf("the UID in the precondition (%s) does not match the UID in record (%s); the object might have been deleted and then recreated", *p.UID, m.GetUID()))
			}
			if p.ResourceVersion != nil && *p.ResourceVersion != m.GetResourceVersion() {
				return nil, nil, apierrors.NewConflict(res.GVR.GroupResource(), name, fmt.Errorf("the ResourceVersion in the precondition (%s) does not match the ResourceVersion in record (%s); the object might have been modified", *p.ResourceVersion, m.GetResourceVersion()))
			}
		}
		if s.cfg.BeforeDelete != nil && !dryRun && m.GetDeletionTimestamp() == nil {
			if err := s.cfg.BeforeDelete(ctx, cur); err != nil {
				return nil, nil, err
			}
		}
		grace := gracePeriod(cur, opts)
		finalizers := m.GetFinalizers()
		switch propagation(res, cur, opts) {
		case metav1.DeletePropagationOrphan:
			finalizers = addString(removeString(finalizers, FinalizerForeground), FinalizerOrphan)
		case metav1.DeletePropagationForeground:
			finalizers = addString(removeString(finalizers, FinalizerOrphan), FinalizerForeground)
		}
		if res == nsResource {
			// The namespace finalizer empties it and then removes it.
			finalizers = addString(finalizers, "flotilla.dev/namespace")
		}
		now := s.now().UTC()
		if grace == 0 && len(finalizers) == 0 {
			if dryRun {
				return cur, mustEncode(res, cur), nil
			}
			out, raw, err := s.finishDelete(ctx, res, ns, name, kv.ModRevision)
			if errors.Is(err, store.ErrConflict) {
				continue
			}
			return out, raw, err
		}
		next := cur.DeepCopyObject()
		nm, _ := meta.Accessor(next)
		nm.SetFinalizers(finalizers)
		if dt := m.GetDeletionTimestamp(); dt == nil || (m.GetDeletionGracePeriodSeconds() != nil && grace < *m.GetDeletionGracePeriodSeconds()) {
			// Start the deletion, or shorten a grace period already running.
			ts := metav1.NewTime(now.Add(time.Duration(grace) * time.Second))
			if dt != nil && ts.After(dt.Time) {
				ts = *dt
			}
			nm.SetDeletionTimestamp(&ts)
			g := grace
			nm.SetDeletionGracePeriodSeconds(&g)
		}
		if grace == 0 {
			nm.SetDeletionGracePeriodSeconds(ptrInt64(0))
		}
		if ns, ok := next.(*corev1.Namespace); ok {
			ns.Status.Phase = corev1.NamespaceTerminating
		}
		if apiequality.Semantic.DeepEqual(next, cur) {
			return cur, mustEncode(res, cur), nil
		}
		data, err := encodeObject(res, next)
		if err != nil {
			return nil, nil, apierrors.NewInternalError(err)
		}
		if dryRun {
			return next, data, nil
		}
		rev, err := s.store.Update(ctx, key, data, kv.ModRevision)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, nil, toStatusError(err, res, name)
		}
		nm.SetResourceVersion(strconv.FormatInt(rev, 10))
		if res == nsResource {
			select {
			case s.nsQueue <- name:
			default:
			}
		}
		return next, mustEncode(res, next), nil
	}
	return nil, nil, apierrors.NewConflict(res.GVR.GroupResource(), name, errors.New("too many concurrent changes; try again"))
}

// finishDelete removes the object from the store, releasing what it held.
func (s *Server) finishDelete(ctx context.Context, res *api.Resource, ns, name string, rev int64) (runtime.Object, []byte, error) {
	kv, drev, err := s.store.Delete(ctx, objectKey(res, ns, name), rev)
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil, nil, err
		}
		return nil, nil, toStatusError(err, res, name)
	}
	obj, err := decodeStored(res, kv.Value)
	if err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	s.admitDelete(ctx, res, obj)
	m, _ := meta.Accessor(obj)
	m.SetResourceVersion(strconv.FormatInt(drev, 10))
	return obj, mustEncode(res, obj), nil
}

// gracePeriod is how long a deletion waits for the owner of the object to
// confirm. Only pods bound to a device wait; everything else goes at once.
func gracePeriod(obj runtime.Object, opts *metav1.DeleteOptions) int64 {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return 0
	}
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		// Nothing runs it (or it finished): no device has to stop it.
		return 0
	}
	if opts.GracePeriodSeconds != nil {
		return *opts.GracePeriodSeconds
	}
	if pod.DeletionGracePeriodSeconds != nil {
		return *pod.DeletionGracePeriodSeconds
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return *pod.Spec.TerminationGracePeriodSeconds
	}
	return corev1.DefaultTerminationGracePeriodSeconds
}

func propagation(res *api.Resource, obj runtime.Object, opts *metav1.DeleteOptions) metav1.DeletionPropagation {
	if opts.PropagationPolicy != nil {
		return *opts.PropagationPolicy
	}
	if opts.OrphanDependents != nil {
		if *opts.OrphanDependents {
			return metav1.DeletePropagationOrphan
		}
		return metav1.DeletePropagationBackground
	}
	m, _ := meta.Accessor(obj)
	for _, f := range m.GetFinalizers() {
		switch f {
		case FinalizerOrphan:
			return metav1.DeletePropagationOrphan
		case FinalizerForeground:
			return metav1.DeletePropagationForeground
		}
	}
	return metav1.DeletePropagationBackground
}

func addString(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

func removeString(list []string, s string) []string {
	out := list[:0:0]
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

func ptrInt64(v int64) *int64 { return &v }
