package replicaset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"flotilla.dev/flotilla/api/podutil"
	"flotilla.dev/flotilla/hub/controllers/controllerutil"
	"flotilla.dev/flotilla/internal/controlloop"
)

// Name is the loop's name in logs, queue metrics and leader election.
const Name = "replicaset"

// DefaultBurstReplicas caps the creations or deletions of one sync, so
// that one huge ReplicaSet cannot monopolise the API (Kubernetes' value).
const DefaultBurstReplicas = 500

// Event reasons, as Kubernetes words them.
const (
	ReasonSuccessfulCreate = controllerutil.ReasonSuccessfulCreate
	ReasonFailedCreate     = controllerutil.ReasonFailedCreate
	ReasonSuccessfulDelete = controllerutil.ReasonSuccessfulDelete
	ReasonFailedDelete     = controllerutil.ReasonFailedDelete
)

// GVK is the kind written into the ownerReferences of the pods.
var GVK = appsv1.SchemeGroupVersion.WithKind("ReplicaSet")

// Options tune the loop; the zero value is production.
type Options struct {
	// Clock times expectations and availability (minReadySeconds).
	Clock clock.Clock
	// BurstReplicas caps creations/deletions per sync; 0 means the default.
	BurstReplicas int
	Logger        *slog.Logger
}

// Controller is the ReplicaSet loop.
type Controller struct {
	client     kubernetes.Interface
	rsLister   appslisters.ReplicaSetLister
	podLister  corelisters.PodLister
	recorder   record.EventRecorder
	clock      clock.Clock
	burst      int
	log        *slog.Logger
	exp        *controllerutil.Expectations
	podControl *controllerutil.PodControl
	loop       *controlloop.Loop
	// podEvents wakes a ReplicaSet for the events of its pods.
	podEvents *controllerutil.OwnerEvents[*appsv1.ReplicaSet, *corev1.Pod]
}

// New wires the loop to the factory's ReplicaSet and Pod informers. Start
// the factory after New and before (or while) Run.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, recorder record.EventRecorder, opts Options) (*Controller, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.BurstReplicas <= 0 {
		opts.BurstReplicas = DefaultBurstReplicas
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	rsInf := factory.Apps().V1().ReplicaSets()
	podInf := factory.Core().V1().Pods()
	c := &Controller{
		client:    client,
		rsLister:  rsInf.Lister(),
		podLister: podInf.Lister(),
		recorder:  recorder,
		clock:     opts.Clock,
		burst:     opts.BurstReplicas,
		log:       opts.Logger.With("controller", Name),
		exp:       controllerutil.NewExpectations(opts.Clock),
	}
	c.podControl = &controllerutil.PodControl{Client: client, Recorder: recorder, Expectations: c.exp}
	c.loop = controlloop.New(Name, c.sync, controlloop.Options{Logger: opts.Logger})
	if _, err := rsInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.loop.Enqueue,
		UpdateFunc: func(_, cur any) { c.loop.Enqueue(cur) },
		DeleteFunc: c.deleteRS,
	}); err != nil {
		return nil, fmt.Errorf("replicaset informer: %w", err)
	}
	c.podEvents = &controllerutil.OwnerEvents[*appsv1.ReplicaSet, *corev1.Pod]{
		Kind: GVK.Kind,
		Get: func(ns, name string) (*appsv1.ReplicaSet, error) {
			return c.rsLister.ReplicaSets(ns).Get(name)
		},
		Matching:             c.rsLister.GetPodReplicaSets,
		Loop:                 c.loop,
		Expectations:         c.exp,
		TerminatingIsDeleted: true,
		Recheck: func(rs *appsv1.ReplicaSet, old, cur *corev1.Pod) time.Duration {
			return controllerutil.AvailableAfter(old, cur, rs.Spec.MinReadySeconds)
		},
	}
	if _, err := podInf.Informer().AddEventHandler(c.podEvents.Handler()); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	c.loop.WaitFor(rsInf.Informer().HasSynced, podInf.Informer().HasSynced)
	return c, nil
}

// Run runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error { return c.loop.Run(ctx, workers) }

func (c *Controller) deleteRS(obj any) {
	key, err := controlloop.Key(obj)
	if err != nil {
		return
	}
	c.exp.Delete(key)
	c.loop.EnqueueKey(key)
}

// sync takes one step for the ReplicaSet named by key.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("replicaset key %q: %w", key, err)
	}
	rs, err := c.rsLister.ReplicaSets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.exp.Delete(key)
		return nil
	}
	if err != nil {
		return err
	}
	selector, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
	if err != nil {
		// A bad selector does not get better by retrying.
		c.log.Warn("invalid selector", "replicaset", key, "err", err)
		return nil
	}
	needsSync := c.exp.Satisfied(key)

	all, err := c.podLister.Pods(ns).List(labels.Everything())
	if err != nil {
		return err
	}
	var active []*corev1.Pod
	for _, p := range all {
		if podutil.IsActive(p) {
			active = append(active, p)
		}
	}
	claimer := &controllerutil.Claimer[*corev1.Pod]{
		Owner:    rs,
		OwnerGVK: GVK,
		Selector: selector,
		Patch: func(ctx context.Context, name string, data []byte) (*corev1.Pod, error) {
			return c.client.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
		},
		CanAdopt: controllerutil.StillOwner(rs, func(ctx context.Context) (metav1.Object, error) {
			return c.client.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
		}),
	}
	pods, claimErr := claimer.Claim(ctx, active)

	var manageErr error
	if needsSync && rs.DeletionTimestamp == nil && claimErr == nil {
		manageErr = c.manageReplicas(ctx, pods, rs, key)
	}

	status := CalculateStatus(rs, pods, manageErr, c.clock.Now())
	updated, err := c.updateStatus(ctx, rs, status)
	if err != nil {
		return errors.Join(claimErr, manageErr, err)
	}
	if manageErr == nil && updated.Spec.MinReadySeconds > 0 &&
		updated.Status.ReadyReplicas == *updated.Spec.Replicas &&
		updated.Status.AvailableReplicas != *updated.Spec.Replicas {
		c.loop.EnqueueAfter(key, time.Duration(updated.Spec.MinReadySeconds)*time.Second)
	}
	return errors.Join(claimErr, manageErr)
}

// manageReplicas creates or deletes pods to close the gap between the
// claimed pods and spec.replicas.
func (c *Controller) manageReplicas(ctx context.Context, pods []*corev1.Pod, rs *appsv1.ReplicaSet, key string) error {
	diff := len(pods) - int(replicas(rs))
	switch {
	case diff < 0:
		n := min(-diff, c.burst)
		c.exp.ExpectCreations(key, n)
		_, err := c.podControl.CreatePods(ctx, rs, key, n, func(int) (*corev1.Pod, error) {
			pod := controllerutil.PodFromTemplate(&rs.Spec.Template, rs, GVK)
			if len(pod.Labels) == 0 {
				return nil, fmt.Errorf("replicaset %s: the pod template has no labels, so its pods could never be counted", key)
			}
			return pod, nil
		})
		return err
	case diff > 0:
		n := min(diff, c.burst)
		victims := PodsToDelete(pods, c.relatedPods(rs), n, c.clock.Now())
		keys := make([]string, len(victims))
		for i, p := range victims {
			keys[i] = controlloop.ObjectKey(p)
		}
		c.exp.ExpectDeletions(key, keys)
		return c.podControl.DeletePods(ctx, rs, key, victims)
	}
	return nil
}

func replicas(rs *appsv1.ReplicaSet) int32 {
	if rs.Spec.Replicas == nil {
		return 1
	}
	return *rs.Spec.Replicas
}

// relatedPods are the pods of every ReplicaSet that shares rs's controller
// (a Deployment's generations), for spreading scale-down across nodes.
func (c *Controller) relatedPods(rs *appsv1.ReplicaSet) []*corev1.Pod {
	owners := map[types.UID]bool{rs.UID: true}
	if ref := metav1.GetControllerOfNoCopy(rs); ref != nil {
		siblings, _ := c.rsLister.ReplicaSets(rs.Namespace).List(labels.Everything())
		for _, s := range siblings {
			if sref := metav1.GetControllerOfNoCopy(s); sref != nil && sref.UID == ref.UID {
				owners[s.UID] = true
			}
		}
	}
	all, _ := c.podLister.Pods(rs.Namespace).List(labels.Everything())
	var out []*corev1.Pod
	for _, p := range all {
		if ref := metav1.GetControllerOfNoCopy(p); ref != nil && owners[ref.UID] {
			out = append(out, p)
		}
	}
	return out
}

// CalculateStatus is the ReplicaSet status for the claimed, active pods.
func CalculateStatus(rs *appsv1.ReplicaSet, pods []*corev1.Pod, manageErr error, now time.Time) appsv1.ReplicaSetStatus {
	st := *rs.Status.DeepCopy()
	templateLabels := labels.Set(rs.Spec.Template.Labels).AsSelectorPreValidated()
	var full, ready, avail int32
	for _, p := range pods {
		if templateLabels.Matches(labels.Set(p.Labels)) {
			full++
		}
		if podutil.IsReady(p) {
			ready++
			if podutil.IsAvailable(p, rs.Spec.MinReadySeconds, now) {
				avail++
			}
		}
	}
	st.Replicas = int32(len(pods))
	st.FullyLabeledReplicas = full
	st.ReadyReplicas = ready
	st.AvailableReplicas = avail
	st.ObservedGeneration = rs.Generation

	failure := conditionIndex(st.Conditions, appsv1.ReplicaSetReplicaFailure)
	switch {
	case manageErr != nil && failure < 0:
		reason := ReasonFailedCreate
		if len(pods) > int(replicas(rs)) {
			reason = ReasonFailedDelete
		}
		st.Conditions = append(st.Conditions, appsv1.ReplicaSetCondition{
			Type: appsv1.ReplicaSetReplicaFailure, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(now), Reason: reason, Message: manageErr.Error(),
		})
	case manageErr == nil && failure >= 0:
		st.Conditions = append(st.Conditions[:failure:failure], st.Conditions[failure+1:]...)
	}
	return st
}

func conditionIndex(conds []appsv1.ReplicaSetCondition, t appsv1.ReplicaSetConditionType) int {
	for i := range conds {
		if conds[i].Type == t {
			return i
		}
	}
	return -1
}

// updateStatus writes status unless it is already there, retrying once on
// a conflict with a fresh read (the spec may have moved; status is ours).
func (c *Controller) updateStatus(ctx context.Context, rs *appsv1.ReplicaSet, status appsv1.ReplicaSetStatus) (*appsv1.ReplicaSet, error) {
	if apiequality.Semantic.DeepEqual(rs.Status, status) {
		return rs, nil
	}
	cur := rs.DeepCopy()
	var err error
	for attempt := 0; ; attempt++ {
		// observedGeneration stays the one the status was computed for.
		cur.Status = status
		var out *appsv1.ReplicaSet
		out, err = c.client.AppsV1().ReplicaSets(cur.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			return out, nil
		}
		if attempt >= 1 || !apierrors.IsConflict(err) {
			break
		}
		fresh, gerr := c.client.AppsV1().ReplicaSets(cur.Namespace).Get(ctx, cur.Name, metav1.GetOptions{})
		if gerr != nil {
			return nil, fmt.Errorf("update status of replicaset %s/%s: %w", rs.Namespace, rs.Name, gerr)
		}
		cur = fresh
	}
	return nil, fmt.Errorf("update status of replicaset %s/%s: %w", rs.Namespace, rs.Name, err)
}
