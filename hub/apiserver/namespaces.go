package apiserver

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"flotilla.dev/flotilla/api"
)

const namespaceFinalizer = "flotilla.dev/namespace"

// bootstrap creates the namespaces and PriorityClasses every hub has.
func (s *Server) bootstrap(ctx context.Context) error {
	for _, name := range []string{api.NamespaceDefault, api.NamespaceNodeLease, api.NamespaceSystem} {
		if s.cache.get(nsResource, "", name) != nil {
			continue
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, _, err := s.create(ctx, nsResource, ns, false, owner{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return s.bootstrapPriorityClasses(ctx)
}

// runNamespaceFinalizer empties namespaces being deleted and then removes
// them. It is level-triggered: every pass looks at every terminating
// namespace, and a pass runs on a signal or every few seconds.
func (s *Server) runNamespaceFinalizer(ctx context.Context) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.nsQueue:
		case <-t.C:
		}
		objs, _ := s.cache.list(nsResource, &filter{})
		for _, co := range objs {
			ns := co.obj.(*corev1.Namespace)
			if ns.DeletionTimestamp == nil {
				continue
			}
			if err := s.finalizeNamespace(ctx, ns.Name); err != nil && ctx.Err() == nil {
				s.log.Warn("emptying a deleted namespace", "namespace", ns.Name, "err", err)
			}
		}
	}
}

func (s *Server) finalizeNamespace(ctx context.Context, name string) error {
	remaining := 0
	for _, res := range api.Resources() {
		if !res.Namespaced {
			continue
		}
		objs, _ := s.cache.list(res, &filter{namespace: name})
		for _, co := range objs {
			remaining++
			m, _ := meta.Accessor(co.obj)
			if m.GetDeletionTimestamp() != nil {
				continue
			}
			if _, _, err := s.delete(ctx, res, name, m.GetName(), &metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		for _, n := range s.cache.unreadableIn(res, name) {
			remaining++
			if _, _, err := s.delete(ctx, res, name, n, &metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	if remaining > 0 {
		return nil
	}
	_, _, _, err := s.update(ctx, nsResource, "", name, "internal", false, owner{}, func(cur runtime.Object) (runtime.Object, error) {
		m, _ := meta.Accessor(cur)
		m.SetFinalizers(removeString(m.GetFinalizers(), namespaceFinalizer))
		return cur, nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
