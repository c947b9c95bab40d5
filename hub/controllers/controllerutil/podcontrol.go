package controllerutil

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"flotilla.dev/flotilla/internal/controlloop"
)

// Event reasons of an owner's pod creations and deletions, as Kubernetes'
// controllers write them.
const (
	ReasonSuccessfulCreate = "SuccessfulCreate"
	ReasonFailedCreate     = "FailedCreate"
	ReasonSuccessfulDelete = "SuccessfulDelete"
	ReasonFailedDelete     = "FailedDelete"
)

// PodControl creates and deletes the pods of the owners of one loop, with
// the events Kubernetes' controllers record, and tells Expectations of the
// creations and deletions that will never be observed (failed, never
// tried, already gone). The caller records the expectation first.
type PodControl struct {
	Client       kubernetes.Interface
	Recorder     record.EventRecorder
	Expectations *Expectations
}

// CreatePods creates n pods for owner (its queue key is key), in
// slow-start batches; newPod makes the i-th. It returns how many it
// created. A create that timed out counts as made: the watch tells.
func (pc *PodControl) CreatePods(ctx context.Context, owner runtime.Object, key string, n int, newPod func(i int) (*corev1.Pod, error)) (int, error) {
	var next atomic.Int64
	created, err := SlowStartBatch(n, 1, func() error {
		pod, err := newPod(int(next.Add(1) - 1))
		if err == nil {
			var out *corev1.Pod
			out, err = pc.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
			if err == nil {
				pc.Recorder.Eventf(owner, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Created pod: %v", out.Name)
				return nil
			}
			if apierrors.IsTimeout(err) {
				return nil
			}
		}
		pc.Recorder.Eventf(owner, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating: %v", err)
		return fmt.Errorf("create pod of %s: %w", key, err)
	})
	for range n - created {
		pc.Expectations.CreationObserved(key)
	}
	return created, err
}

// DeletePods deletes pods of owner (its queue key is key) at once, each
// only if it is still the same pod (UID precondition).
func (pc *PodControl) DeletePods(ctx context.Context, owner runtime.Object, key string, pods []*corev1.Pod) error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := pc.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
			switch {
			case err == nil:
				pc.Recorder.Eventf(owner, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted pod: %v", p.Name)
			case apierrors.IsNotFound(err):
				// Already gone: its deletion event may never come.
				pc.Expectations.DeletionObserved(key, controlloop.ObjectKey(p))
			default:
				pc.Expectations.DeletionObserved(key, controlloop.ObjectKey(p))
				pc.Recorder.Eventf(owner, corev1.EventTypeWarning, ReasonFailedDelete, "Error deleting: %v", err)
				mu.Lock()
				errs = append(errs, fmt.Errorf("delete pod %s/%s of %s: %w", p.Namespace, p.Name, key, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// StillOwner is a Claimer's CanAdopt for owner: get reads it afresh (not
// from a cache), and adoption stops if it was deleted and recreated (another
// UID) or is being deleted.
func StillOwner(owner metav1.Object, get func(ctx context.Context) (metav1.Object, error)) func(ctx context.Context) error {
	uid := owner.GetUID()
	return func(ctx context.Context) error {
		fresh, err := get(ctx)
		if err != nil {
			return err
		}
		if fresh.GetUID() != uid {
			return fmt.Errorf("%s/%s was deleted and recreated (uid %s, now %s)", owner.GetNamespace(), owner.GetName(), uid, fresh.GetUID())
		}
		if fresh.GetDeletionTimestamp() != nil {
			return fmt.Errorf("%s/%s is being deleted", owner.GetNamespace(), owner.GetName())
		}
		return nil
	}
}
