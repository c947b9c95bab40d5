package daemonset

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// DefaultRevisionHistoryLimit is how many old revisions a DaemonSet keeps
// when spec.revisionHistoryLimit is unset (Kubernetes' default).
const DefaultRevisionHistoryLimit = 10

// revisionData is what a ControllerRevision of ds records: a strategic
// merge patch that puts the template back as it is, as kube-controller-
// manager writes it, so that `kubectl rollout undo ds` (which applies the
// revision's data to the DaemonSet) and `rollout history --revision`
// (which shows it) work unchanged.
func revisionData(ds *appsv1.DaemonSet) ([]byte, error) {
	raw, err := json.Marshal(&ds.Spec.Template)
	if err != nil {
		return nil, err
	}
	var tmpl map[string]any
	if err := json.Unmarshal(raw, &tmpl); err != nil {
		return nil, err
	}
	tmpl["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
}

// syncHistory makes sure ds's current template has a ControllerRevision,
// numbered after every other (a template that goes back to an earlier
// revision makes that revision the newest again, as kubectl rollout undo
// expects), and deletes the oldest revisions past the history limit that
// no pod runs any more.
func (c *Controller) syncHistory(ctx context.Context, ds *appsv1.DaemonSet, hash string, nodePods map[string][]*corev1.Pod) error {
	all, err := c.revLister.ControllerRevisions(ds.Namespace).List(labels.Everything())
	if err != nil {
		return err
	}
	var revs []*appsv1.ControllerRevision
	for _, r := range all {
		if metav1.IsControlledBy(r, ds) {
			revs = append(revs, r)
		}
	}
	sort.Slice(revs, func(i, j int) bool { return revs[i].Revision < revs[j].Revision })
	var cur *appsv1.ControllerRevision
	var maxRev int64
	for _, r := range revs {
		maxRev = max(maxRev, r.Revision)
		if r.Labels[appsv1.ControllerRevisionHashLabelKey] == hash {
			cur = r
		}
	}
	switch {
	case cur == nil:
		if cur, err = c.createRevision(ctx, ds, hash, maxRev+1); err != nil {
			return err
		}
		revs = append(revs, cur)
	case cur.Revision < maxRev:
		next := cur.DeepCopy()
		next.Revision = maxRev + 1
		if _, err := c.client.AppsV1().ControllerRevisions(ds.Namespace).Update(ctx, next, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("daemonset %s/%s: renumbering revision %s: %w", ds.Namespace, ds.Name, cur.Name, err)
		}
	}
	return c.pruneHistory(ctx, ds, cur, revs, nodePods)
}

func (c *Controller) createRevision(ctx context.Context, ds *appsv1.DaemonSet, hash string, number int64) (*appsv1.ControllerRevision, error) {
	data, err := revisionData(ds)
	if err != nil {
		return nil, fmt.Errorf("daemonset %s/%s: recording its template: %w", ds.Namespace, ds.Name, err)
	}
	lbls := map[string]string{}
	for k, v := range ds.Spec.Template.Labels {
		lbls[k] = v
	}
	lbls[appsv1.ControllerRevisionHashLabelKey] = hash
	annotations := map[string]string{}
	for k, v := range ds.Annotations {
		// kubectl rollout history shows kubernetes.io/change-cause.
		annotations[k] = v
	}
	rev := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name: ds.Name + "-" + hash, Namespace: ds.Namespace, Labels: lbls, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, GVK)},
		},
		Data:     runtime.RawExtension{Raw: data},
		Revision: number,
	}
	out, err := c.client.AppsV1().ControllerRevisions(ds.Namespace).Create(ctx, rev, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Made by an earlier pass the cache has not shown yet, or by
		// someone else under this name.
		got, gerr := c.client.AppsV1().ControllerRevisions(ds.Namespace).Get(ctx, rev.Name, metav1.GetOptions{})
		if gerr == nil && metav1.IsControlledBy(got, ds) {
			return got, nil
		}
		return nil, fmt.Errorf("daemonset %s/%s: a ControllerRevision %s exists that it does not own; delete or rename it", ds.Namespace, ds.Name, rev.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("daemonset %s/%s: recording revision %d: %w", ds.Namespace, ds.Name, number, err)
	}
	return out, nil
}

// pruneHistory deletes the oldest revisions beyond the limit, never the
// current one nor one a pod still runs.
func (c *Controller) pruneHistory(ctx context.Context, ds *appsv1.DaemonSet, cur *appsv1.ControllerRevision, revs []*appsv1.ControllerRevision, nodePods map[string][]*corev1.Pod) error {
	limit := DefaultRevisionHistoryLimit
	if ds.Spec.RevisionHistoryLimit != nil {
		limit = int(*ds.Spec.RevisionHistoryLimit)
	}
	live := map[string]bool{}
	for _, pods := range nodePods {
		for _, p := range pods {
			live[p.Labels[appsv1.ControllerRevisionHashLabelKey]] = true
		}
	}
	var old []*appsv1.ControllerRevision
	for _, r := range revs {
		if r.Name != cur.Name && !live[r.Labels[appsv1.ControllerRevisionHashLabelKey]] {
			old = append(old, r)
		}
	}
	sort.Slice(old, func(i, j int) bool { return old[i].Revision < old[j].Revision })
	for len(old) > limit {
		err := c.client.AppsV1().ControllerRevisions(ds.Namespace).Delete(ctx, old[0].Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("daemonset %s/%s: deleting old revision %s: %w", ds.Namespace, ds.Name, old[0].Name, err)
		}
		old = old[1:]
	}
	return nil
}
