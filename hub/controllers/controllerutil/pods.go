package controllerutil

import (
	"errors"
	"maps"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// PodFromTemplate builds a pod for owner from template: labels, annotations,
// finalizers and spec copied, a controller ownerReference with
// blockOwnerDeletion, and a generated name prefixed by the owner's name.
// The pod shares nothing with the template, so the caller may change it.
func PodFromTemplate(template *corev1.PodTemplateSpec, owner metav1.Object, gvk schema.GroupVersionKind) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    owner.GetName() + "-",
			Namespace:       owner.GetNamespace(),
			Labels:          maps.Clone(template.Labels),
			Annotations:     maps.Clone(template.Annotations),
			Finalizers:      append([]string(nil), template.Finalizers...),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, gvk)},
		},
		Spec: *template.Spec.DeepCopy(),
	}
}

// SlowStartBatch calls fn count times in batches of 1, 2, 4, ... starting
// at initial, stopping after the first batch with a failure. It returns the
// number of successful calls: a quota error costs one request, not count.
func SlowStartBatch(count, initial int, fn func() error) (int, error) {
	remaining, successes := count, 0
	for batch := min(remaining, initial); batch > 0; batch = min(2*batch, remaining) {
		errCh := make(chan error, batch)
		var wg sync.WaitGroup
		for range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := fn(); err != nil {
					errCh <- err
				}
			}()
		}
		wg.Wait()
		close(errCh)
		successes += batch - len(errCh)
		if len(errCh) > 0 {
			var errs []error
			for err := range errCh {
				errs = append(errs, err)
			}
			return successes, errors.Join(errs...)
		}
		remaining -= batch
	}
	return successes, nil
}
