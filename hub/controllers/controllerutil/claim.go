package controllerutil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"flotilla.dev/flotilla/api/podutil"
)

// Claimer decides which of a set of objects an owner controls, adopting
// matching orphans and releasing owned objects that no longer match, as
// Kubernetes' ControllerRefManager does. Patch applies a strategic merge
// patch to the named object (namespace of the owner) and returns the result.
type Claimer[T metav1.Object] struct {
	Owner    metav1.Object
	OwnerGVK schema.GroupVersionKind
	Selector labels.Selector
	Patch    func(ctx context.Context, name string, data []byte) (T, error)
	// CanAdopt is called at most once, before the first adoption, with an
	// uncached read of the owner: adopting for an owner that is being deleted
	// (or was deleted and recreated) would orphan the object again at once.
	CanAdopt func(ctx context.Context) error

	once     sync.Once
	adoptErr error
}

// Claim returns the objects the owner controls after adoptions and
// releases. Errors for individual objects are joined; the objects claimed so
// far are returned along with them.
func (c *Claimer[T]) Claim(ctx context.Context, objs []T) ([]T, error) {
	var claimed []T
	var errs []error
	for _, o := range objs {
		got, ok, err := c.claimOne(ctx, o)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			claimed = append(claimed, got)
		}
	}
	return claimed, errors.Join(errs...)
}

func (c *Claimer[T]) claimOne(ctx context.Context, o T) (T, bool, error) {
	if podutil.IsMirror(o) {
		// A mirror pod stands for a static pod a device runs from its own
		// manifests: no controller owns it, whatever labels it has (a device
		// could otherwise lend a ReplicaSet replicas it does not have).
		return o, false, nil
	}
	ref := metav1.GetControllerOfNoCopy(o)
	match := c.Selector.Matches(labels.Set(o.GetLabels()))
	if ref != nil {
		if ref.UID != c.Owner.GetUID() {
			return o, false, nil // someone else's
		}
		if match {
			return o, true, nil
		}
		// An owner being deleted keeps what it has so the garbage collector
		// can finish; otherwise a no-longer-matching object goes free.
		if c.Owner.GetDeletionTimestamp() != nil {
			return o, false, nil
		}
		if err := c.release(ctx, o); err != nil {
			if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
				return o, false, nil // gone or changed: it is no longer ours to release
			}
			return o, false, err
		}
		return o, false, nil
	}
	if !match || c.Owner.GetDeletionTimestamp() != nil || o.GetDeletionTimestamp() != nil {
		return o, false, nil
	}
	adopted, err := c.adopt(ctx, o)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return o, false, nil
		}
		return o, false, err
	}
	return adopted, true, nil
}

// adopt returns the patched object: later writes in the same sync must
// start from its resourceVersion, not the cache's.
func (c *Claimer[T]) adopt(ctx context.Context, o T) (T, error) {
	if c.CanAdopt != nil {
		c.once.Do(func() { c.adoptErr = c.CanAdopt(ctx) })
		if c.adoptErr != nil {
			return o, fmt.Errorf("adopt %s/%s: %w", o.GetNamespace(), o.GetName(), c.adoptErr)
		}
	}
	data, err := AdoptPatch(c.Owner, c.OwnerGVK, o.GetUID())
	if err != nil {
		return o, err
	}
	out, err := c.Patch(ctx, o.GetName(), data)
	if err != nil {
		return o, fmt.Errorf("adopt %s/%s: %w", o.GetNamespace(), o.GetName(), err)
	}
	return out, nil
}

func (c *Claimer[T]) release(ctx context.Context, o T) error {
	data, err := ReleasePatch(c.Owner.GetUID(), o.GetUID())
	if err != nil {
		return err
	}
	if _, err := c.Patch(ctx, o.GetName(), data); err != nil {
		return fmt.Errorf("release %s/%s: %w", o.GetNamespace(), o.GetName(), err)
	}
	return nil
}

// AdoptPatch is the strategic merge patch that adds a controller
// ownerReference to the object with UID uid. The uid in the patch is a
// precondition: a recreated object with the same name is not adopted.
func AdoptPatch(owner metav1.Object, gvk schema.GroupVersionKind, uid types.UID) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{
		"ownerReferences": []*metav1.OwnerReference{metav1.NewControllerRef(owner, gvk)},
		"uid":             uid,
	}})
}

// ReleasePatch is the strategic merge patch that removes the ownerReference
// to ownerUID from the object with UID uid.
func ReleasePatch(ownerUID, uid types.UID) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{
		"ownerReferences": []map[string]any{{"$patch": "delete", "uid": ownerUID}},
		"uid":             uid,
	}})
}
