package apiserver

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub/store"
)

// Lookup reads stored objects for admission steps that judge a write
// against another object: a device's pod status against its Node's pod
// CIDR, a device's Event against the pod it is about.
type Lookup interface {
	// Get returns a private copy of the object, or an error
	// apierrors.IsNotFound recognizes.
	Get(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (runtime.Object, error)
}

type lookupKey struct{}

// LookupFrom returns the Lookup of the server whose admission step ctx
// was given to, or nil outside one.
func LookupFrom(ctx context.Context) Lookup {
	l, _ := ctx.Value(lookupKey{}).(Lookup)
	return l
}

// withLookup is the context an admission step is called with.
func (s *Server) withLookup(ctx context.Context) context.Context {
	return context.WithValue(ctx, lookupKey{}, serverLookup{s})
}

type serverLookup struct{ s *Server }

// Get reads the watch cache, which the device making the request was
// served from, and the store when the cache does not have the object
// (yet).
func (l serverLookup) Get(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (runtime.Object, error) {
	res, ok := api.ResourceFor(gvr)
	if !ok {
		return nil, fmt.Errorf("lookup: the hub does not serve %s", gvr)
	}
	if co := l.s.cache.get(res, namespace, name); co != nil {
		return co.obj.DeepCopyObject(), nil
	}
	kv, err := l.s.store.Get(ctx, objectKey(res, namespace, name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
	}
	if err != nil {
		return nil, err
	}
	return decodeStored(res, kv.Value)
}
