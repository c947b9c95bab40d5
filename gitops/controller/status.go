package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api/v1alpha1"
)

// writeStatus changes the status of the latest version of gs, retrying
// on conflicts with other writers of the object.
func (c *Controller) writeStatus(ctx context.Context, gs *v1alpha1.GitSource, mutate func(*v1alpha1.GitSourceStatus)) error {
	client := c.dyn.Resource(gvr).Namespace(gs.Namespace)
	for attempt := 0; ; attempt++ {
		u, err := client.Get(ctx, gs.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s/%s for its status: %w", gs.Namespace, gs.Name, err)
		}
		cur, err := fromUnstructured(u)
		if err != nil {
			return err
		}
		mutate(&cur.Status)
		// Later reconciles read the status the loop wrote.
		gs.Status = *cur.Status.DeepCopy()
		out, err := toUnstructured(cur)
		if err != nil {
			return err
		}
		_, err = client.UpdateStatus(ctx, out, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) && attempt < 10 {
			continue
		}
		if err != nil {
			return fmt.Errorf("writing the status of %s/%s: %w", gs.Namespace, gs.Name, err)
		}
		return nil
	}
}

func setCondition(s *v1alpha1.GitSourceStatus, typ string, status bool, reason, msg string, gen int64) {
	cs := metav1.ConditionFalse
	if status {
		cs = metav1.ConditionTrue
	}
	if reason == "" {
		reason = "Unknown"
	}
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: typ, Status: cs, Reason: reason, Message: truncate(msg, 1024), ObservedGeneration: gen})
}

func findCondition(cs []metav1.Condition, typ string) *metav1.Condition {
	return meta.FindStatusCondition(cs, typ)
}
