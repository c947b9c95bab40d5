package deployment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
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
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/hub/controllers/controllerutil"
	"flotilla.dev/flotilla/hub/controllers/replicaset"
	"flotilla.dev/flotilla/internal/controlloop"
)

// Name is the loop's name in logs, queue metrics and leader election.
const Name = "deployment"

// GVK is the kind written into the ownerReferences of the ReplicaSets.
var GVK = appsv1.SchemeGroupVersion.WithKind("Deployment")

// Options tune the loop; the zero value is production.
type Options struct {
	// Clock times progress deadlines.
	Clock  clock.Clock
	Logger *slog.Logger
	// Rollouts, when set, stage template changes by RolloutPolicy.
	Rollouts Rollouts
}

// Controller is the Deployment loop.
type Controller struct {
	client    kubernetes.Interface
	dLister   appslisters.DeploymentLister
	rsLister  appslisters.ReplicaSetLister
	podLister corelisters.PodLister
	recorder  record.EventRecorder
	clock     clock.Clock
	log       *slog.Logger
	loop      *controlloop.Loop
	// rsEvents wakes a Deployment for the events of its ReplicaSets.
	rsEvents *controllerutil.OwnerEvents[*appsv1.Deployment, *appsv1.ReplicaSet]
	rollouts Rollouts
}

// New wires the loop to the factory's Deployment, ReplicaSet and Pod
// informers.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, recorder record.EventRecorder, opts Options) (*Controller, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	dInf := factory.Apps().V1().Deployments()
	rsInf := factory.Apps().V1().ReplicaSets()
	podInf := factory.Core().V1().Pods()
	c := &Controller{
		client:    client,
		dLister:   dInf.Lister(),
		rsLister:  rsInf.Lister(),
		podLister: podInf.Lister(),
		recorder:  recorder,
		clock:     opts.Clock,
		log:       opts.Logger.With("controller", Name),
		rollouts:  opts.Rollouts,
	}
	c.loop = controlloop.New(Name, c.sync, controlloop.Options{Logger: opts.Logger})
	if _, err := dInf.Informer().AddEventHandler(c.loop.Handler()); err != nil {
		return nil, fmt.Errorf("deployment informer: %w", err)
	}
	c.rsEvents = &controllerutil.OwnerEvents[*appsv1.Deployment, *appsv1.ReplicaSet]{
		Kind: GVK.Kind,
		Get: func(ns, name string) (*appsv1.Deployment, error) {
			return c.dLister.Deployments(ns).Get(name)
		},
		Matching: c.matching,
		Loop:     c.loop,
	}
	if _, err := rsInf.Informer().AddEventHandler(c.rsEvents.Handler()); err != nil {
		return nil, fmt.Errorf("replicaset informer: %w", err)
	}
	podHandler := cache.ResourceEventHandlerFuncs{DeleteFunc: c.deletePod}
	synced := []cache.InformerSynced{dInf.Informer().HasSynced, rsInf.Informer().HasSynced, podInf.Informer().HasSynced}
	if c.rollouts != nil {
		// A staged rollout counts pods by the device they are bound to
		// and waits for its deletion marks: both are pod changes no
		// ReplicaSet status shows.
		podHandler.UpdateFunc = c.updatePod
		if err := c.rollouts.OnChange(c.enqueueNamespace); err != nil {
			return nil, fmt.Errorf("rollout policies: %w", err)
		}
		synced = append(synced, c.rollouts.HasSynced)
	}
	if _, err := podInf.Informer().AddEventHandler(podHandler); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	c.loop.WaitFor(synced...)
	return c, nil
}

// Run runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error { return c.loop.Run(ctx, workers) }

// matching lists the Deployments that may adopt the orphan rs.
func (c *Controller) matching(rs *appsv1.ReplicaSet) ([]*appsv1.Deployment, error) {
	ds, err := c.dLister.Deployments(rs.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []*appsv1.Deployment
	for _, d := range ds {
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(rs.Labels)) {
			continue
		}
		out = append(out, d)
	}
	return out, nil
}

// deletePod matters only to Recreate, which waits for the old pods to be
// gone before it creates the new ReplicaSet.
func (c *Controller) deletePod(obj any) {
	pod, ok := controlloop.Deleted[*corev1.Pod](obj)
	if !ok {
		return
	}
	rs, ok := controllerutil.ResolveController(pod.Namespace, metav1.GetControllerOfNoCopy(pod), replicaset.GVK.Kind,
		func(ns, name string) (*appsv1.ReplicaSet, error) { return c.rsLister.ReplicaSets(ns).Get(name) })
	if !ok {
		return
	}
	d, ok := c.rsEvents.Resolve(rs.Namespace, metav1.GetControllerOfNoCopy(rs))
	if ok && d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		c.loop.EnqueueKey(controlloop.ObjectKey(d))
	}
}

// updatePod wakes a staged Deployment when one of its pods is bound or
// its deletion cost changes.
func (c *Controller) updatePod(oldObj, curObj any) {
	old, ok1 := oldObj.(*corev1.Pod)
	cur, ok2 := curObj.(*corev1.Pod)
	if !ok1 || !ok2 || (old.Spec.NodeName == cur.Spec.NodeName &&
		old.Annotations[replicaset.AnnotationPodDeletionCost] == cur.Annotations[replicaset.AnnotationPodDeletionCost]) {
		return
	}
	rs, ok := controllerutil.ResolveController(cur.Namespace, metav1.GetControllerOfNoCopy(cur), replicaset.GVK.Kind,
		func(ns, name string) (*appsv1.ReplicaSet, error) { return c.rsLister.ReplicaSets(ns).Get(name) })
	if !ok {
		return
	}
	if d, ok := c.rsEvents.Resolve(rs.Namespace, metav1.GetControllerOfNoCopy(rs)); ok {
		c.loop.EnqueueKey(controlloop.ObjectKey(d))
	}
}

func (c *Controller) enqueueNamespace(ns string) {
	ds, err := c.dLister.Deployments(ns).List(labels.Everything())
	if err != nil {
		return
	}
	for _, d := range ds {
		c.loop.EnqueueKey(controlloop.ObjectKey(d))
	}
}

// sync takes one step for the Deployment named by k.
func (c *Controller) sync(ctx context.Context, k string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(k)
	if err != nil {
		return fmt.Errorf("deployment key %q: %w", k, err)
	}
	cached, err := c.dLister.Deployments(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	d := cached.DeepCopy()

	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		c.log.Warn("invalid selector", "deployment", k, "err", err)
		return nil
	}
	if selector.Empty() {
		c.recorder.Eventf(d, corev1.EventTypeWarning, ReasonSelectingAll, "This deployment is selecting all pods. A non-empty selector is required.")
		if d.Status.ObservedGeneration < d.Generation {
			d.Status.ObservedGeneration = d.Generation
			_, err := c.client.AppsV1().Deployments(ns).UpdateStatus(ctx, d, metav1.UpdateOptions{})
			return err
		}
		return nil
	}

	rsList, err := c.claimReplicaSets(ctx, d, selector)
	if err != nil {
		return err
	}
	s := &step{c: c, d: d}

	if d.DeletionTimestamp != nil {
		return s.syncStatusOnly(ctx, rsList)
	}
	if err := s.checkPaused(ctx); err != nil {
		return err
	}
	if d.Spec.Paused {
		return s.scaleOnly(ctx, rsList)
	}
	scaling, err := s.isScalingEvent(ctx, rsList)
	if err != nil {
		return err
	}
	if scaling {
		return s.scaleOnly(ctx, rsList)
	}
	plan, err := s.stagedPlan()
	if err != nil {
		return err
	}
	if plan != nil {
		return s.rolloutStaged(ctx, rsList, plan)
	}
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		return s.rolloutRecreate(ctx, rsList)
	}
	return s.rolloutRolling(ctx, rsList)
}

// claimReplicaSets adopts and releases ReplicaSets as the selector says.
func (c *Controller) claimReplicaSets(ctx context.Context, d *appsv1.Deployment, selector labels.Selector) ([]*appsv1.ReplicaSet, error) {
	all, err := c.rsLister.ReplicaSets(d.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	claimer := &controllerutil.Claimer[*appsv1.ReplicaSet]{
		Owner:    d,
		OwnerGVK: GVK,
		Selector: selector,
		Patch: func(ctx context.Context, name string, data []byte) (*appsv1.ReplicaSet, error) {
			return c.client.AppsV1().ReplicaSets(d.Namespace).Patch(ctx, name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
		},
		CanAdopt: func(ctx context.Context) error {
			fresh, err := c.client.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if fresh.UID != d.UID {
				return fmt.Errorf("deployment %s/%s was deleted and recreated", d.Namespace, d.Name)
			}
			if fresh.DeletionTimestamp != nil {
				return fmt.Errorf("deployment %s/%s is being deleted", d.Namespace, d.Name)
			}
			return nil
		},
	}
	return claimer.Claim(ctx, all)
}

// step is one sync of one Deployment: d is our working copy, kept at the
// latest resourceVersion we wrote so that consecutive writes in one sync
// do not conflict with ourselves.
type step struct {
	c *Controller
	d *appsv1.Deployment
	// newCap, when set, bounds the size a new ReplicaSet is created with
	// (a staged rollout's NewTarget).
	newCap *int32
	// waiting, when set, is why a staged rollout waits for its
	// RolloutPolicy rather than for the Deployment's own replicas: the
	// progress deadline does not count meanwhile.
	waiting string
}

func (s *step) now() time.Time { return s.c.clock.Now() }

func (s *step) updateStatus(ctx context.Context) error {
	out, err := s.c.client.AppsV1().Deployments(s.d.Namespace).UpdateStatus(ctx, s.d, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update status of deployment %s/%s: %w", s.d.Namespace, s.d.Name, err)
	}
	s.d.ResourceVersion = out.ResourceVersion
	return nil
}

// setRevision records the Deployment's current revision in its own
// annotations (through the main resource: /status ignores metadata).
func (s *step) setRevision(ctx context.Context, revision string) error {
	if s.d.Annotations[AnnotationRevision] == revision {
		return nil
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, AnnotationRevision, revision)
	out, err := s.c.client.AppsV1().Deployments(s.d.Namespace).Patch(ctx, s.d.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("set revision of deployment %s/%s: %w", s.d.Namespace, s.d.Name, err)
	}
	if s.d.Annotations == nil {
		s.d.Annotations = map[string]string{}
	}
	s.d.Annotations[AnnotationRevision] = revision
	s.d.ResourceVersion = out.ResourceVersion
	return nil
}

func (s *step) checkPaused(ctx context.Context) error {
	if !hasProgressDeadline(s.d) {
		return nil
	}
	cond := getCondition(s.d.Status, appsv1.DeploymentProgressing)
	paused := cond != nil && cond.Reason == ReasonDeploymentPaused
	switch {
	case s.d.Spec.Paused && !paused:
		setCondition(&s.d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionUnknown, ReasonDeploymentPaused, "Deployment is paused", s.now()))
	case !s.d.Spec.Paused && paused:
		setCondition(&s.d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionUnknown, ReasonDeploymentResumed, "Deployment is resumed", s.now()))
	default:
		return nil
	}
	return s.updateStatus(ctx)
}

// getAllReplicaSetsAndSyncRevision splits rsList into the new ReplicaSet
// (creating it if asked) and the old ones, and brings the new one's
// revision annotations up to date.
func (s *step) getAllReplicaSetsAndSyncRevision(ctx context.Context, rsList []*appsv1.ReplicaSet, create bool) (*appsv1.ReplicaSet, []*appsv1.ReplicaSet, error) {
	existing := FindNewReplicaSet(s.d, rsList)
	var olds []*appsv1.ReplicaSet
	for _, rs := range rsList {
		if existing == nil || rs.UID != existing.UID {
			olds = append(olds, rs)
		}
	}
	newRS, err := s.getNewReplicaSet(ctx, existing, olds, create)
	return newRS, olds, err
}

func (s *step) getNewReplicaSet(ctx context.Context, existing *appsv1.ReplicaSet, olds []*appsv1.ReplicaSet, create bool) (*appsv1.ReplicaSet, error) {
	d := s.d
	newRevision := maxRevision(olds) + 1
	if existing != nil {
		rsCopy := existing.DeepCopy()
		changed := setNewRSAnnotations(d, rsCopy, newRevision, true)
		if changed || rsCopy.Spec.MinReadySeconds != d.Spec.MinReadySeconds {
			rsCopy.Spec.MinReadySeconds = d.Spec.MinReadySeconds
			return s.c.client.AppsV1().ReplicaSets(rsCopy.Namespace).Update(ctx, rsCopy, metav1.UpdateOptions{})
		}
		if err := s.setRevision(ctx, rsCopy.Annotations[AnnotationRevision]); err != nil {
			return nil, err
		}
		if hasProgressDeadline(d) && getCondition(d.Status, appsv1.DeploymentProgressing) == nil {
			setCondition(&d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, ReasonFoundNewReplicaSet,
				fmt.Sprintf("Found new replica set %q", rsCopy.Name), s.now()))
			if err := s.updateStatus(ctx); err != nil {
				return nil, err
			}
		}
		return rsCopy, nil
	}
	if !create {
		return nil, nil
	}

	template := *d.Spec.Template.DeepCopy()
	hash := controllerutil.ComputeHash(&d.Spec.Template, d.Status.CollisionCount)
	if template.Labels == nil {
		template.Labels = map[string]string{}
	}
	template.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = hash
	sel := d.Spec.Selector.DeepCopy()
	if sel.MatchLabels == nil {
		sel.MatchLabels = map[string]string{}
	}
	sel.MatchLabels[appsv1.DefaultDeploymentUniqueLabelKey] = hash
	rsLabels := make(map[string]string, len(template.Labels))
	for k, v := range template.Labels {
		rsLabels[k] = v
	}
	newRS := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			// Deterministic, so that a repeated create after a lost reply
			// finds the first one instead of making a second.
			Name:            d.Name + "-" + hash,
			Namespace:       d.Namespace,
			Labels:          rsLabels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, GVK)},
		},
		Spec: appsv1.ReplicaSetSpec{
			Replicas:        ptr.To[int32](0),
			MinReadySeconds: d.Spec.MinReadySeconds,
			Selector:        sel,
			Template:        template,
		},
	}
	n := NewRSNewReplicas(d, append(append([]*appsv1.ReplicaSet(nil), olds...), newRS), newRS)
	if s.newCap != nil {
		n = max(0, min(n, *s.newCap))
	}
	newRS.Spec.Replicas = ptr.To(n)
	setNewRSAnnotations(d, newRS, newRevision, false)

	created, err := s.c.client.AppsV1().ReplicaSets(d.Namespace).Create(ctx, newRS, metav1.CreateOptions{})
	alreadyExists := false
	switch {
	case apierrors.IsAlreadyExists(err):
		alreadyExists = true
		rs, rsErr := s.c.rsLister.ReplicaSets(d.Namespace).Get(newRS.Name)
		if rsErr != nil {
			return nil, fmt.Errorf("replicaset %s exists but is not in the cache yet: %w", newRS.Name, rsErr)
		}
		if ref := metav1.GetControllerOfNoCopy(rs); ref != nil && ref.UID == d.UID && EqualIgnoreHash(&d.Spec.Template, &rs.Spec.Template) {
			created = rs
			break
		}
		// A different template hashed to the same name: bump the collision
		// count so the next sync computes another name.
		d.Status.CollisionCount = ptr.To(ptr.Deref(d.Status.CollisionCount, 0) + 1)
		if uerr := s.updateStatus(ctx); uerr != nil {
			return nil, errors.Join(err, uerr)
		}
		return nil, fmt.Errorf("hash collision for replicaset %s, collisionCount now %d: %w", newRS.Name, *d.Status.CollisionCount, err)
	case err != nil:
		msg := fmt.Sprintf("Failed to create new replica set %q: %v", newRS.Name, err)
		if hasProgressDeadline(d) {
			setCondition(&d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionFalse, ReasonFailedReplicaSetCreate, msg, s.now()))
			_ = s.updateStatus(ctx) // the create error is the one to report
		}
		s.c.recorder.Event(d, corev1.EventTypeWarning, ReasonFailedReplicaSetCreate, msg)
		return nil, fmt.Errorf("create replicaset for deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	if !alreadyExists && n > 0 {
		s.c.recorder.Eventf(d, corev1.EventTypeNormal, ReasonScalingReplicaSet, "Scaled up replica set %s from 0 to %d", created.Name, n)
	}
	if err := s.setRevision(ctx, strconv.FormatInt(newRevision, 10)); err != nil {
		return nil, err
	}
	if !alreadyExists && hasProgressDeadline(d) {
		setCondition(&d.Status, newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, ReasonNewReplicaSetCreated,
			fmt.Sprintf("Created new replica set %q", created.Name), s.now()))
		if err := s.updateStatus(ctx); err != nil {
			return nil, err
		}
	}
	return created, nil
}

// scaleRS sets rs's replicas (and its size annotations) and records the
// ScalingReplicaSet event; it returns whether the size changed.
func (s *step) scaleRS(ctx context.Context, rs *appsv1.ReplicaSet, size int32) (bool, *appsv1.ReplicaSet, error) {
	if rsReplicas(rs) == size {
		return false, rs, nil
	}
	op := "up"
	if size < rsReplicas(rs) {
		op = "down"
	}
	return s.scaleRSWith(ctx, rs, size, op)
}

func (s *step) scaleRSWith(ctx context.Context, rs *appsv1.ReplicaSet, size int32, op string) (bool, *appsv1.ReplicaSet, error) {
	sizeChanged := rsReplicas(rs) != size
	cp := rs.DeepCopy()
	annChanged := setReplicasAnnotations(cp, desiredReplicas(s.d), desiredReplicas(s.d)+MaxSurge(s.d))
	if !sizeChanged && !annChanged {
		return false, rs, nil
	}
	from := rsReplicas(rs)
	cp.Spec.Replicas = ptr.To(size)
	out, err := s.c.client.AppsV1().ReplicaSets(cp.Namespace).Update(ctx, cp, metav1.UpdateOptions{})
	if err != nil {
		return false, rs, fmt.Errorf("scale replicaset %s/%s to %d: %w", rs.Namespace, rs.Name, size, err)
	}
	if sizeChanged {
		s.c.recorder.Eventf(s.d, corev1.EventTypeNormal, ReasonScalingReplicaSet, "Scaled %s replica set %s from %d to %d", op, rs.Name, from, size)
	}
	return sizeChanged, out, nil
}

// ---- status ----

func (s *step) syncStatusOnly(ctx context.Context, rsList []*appsv1.ReplicaSet) error {
	newRS, olds, err := s.getAllReplicaSetsAndSyncRevision(ctx, rsList, false)
	if err != nil {
		return err
	}
	return s.syncDeploymentStatus(ctx, append(olds, newRS), newRS)
}

func (s *step) syncDeploymentStatus(ctx context.Context, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) error {
	st := calculateStatus(s.d, all, newRS, s.now())
	if apiequality.Semantic.DeepEqual(s.d.Status, st) {
		return nil
	}
	s.d.Status = st
	return s.updateStatus(ctx)
}

// syncRolloutStatus writes status and judges progress against the
// deadline.
func (s *step) syncRolloutStatus(ctx context.Context, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) error {
	d := s.d
	now := s.now()
	st := calculateStatus(d, all, newRS, now)
	if !hasProgressDeadline(d) {
		removeCondition(&st, appsv1.DeploymentProgressing)
	}
	cur := getCondition(d.Status, appsv1.DeploymentProgressing)
	complete := st.Replicas == st.UpdatedReplicas && cur != nil && cur.Reason == ReasonNewReplicaSetAvailable
	if hasProgressDeadline(d) && !complete {
		waited := cur != nil && cur.Reason == ReasonWaitingForRolloutWave
		switch {
		case s.waiting != "" && !deploymentComplete(d, &st):
			// As a paused Deployment's: Unknown, and no deadline.
			if !waited || cur.Message != s.waiting {
				removeCondition(&st, appsv1.DeploymentProgressing)
				setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionUnknown, ReasonWaitingForRolloutWave, s.waiting, now))
			}
		case waited && !deploymentComplete(d, &st) && !deploymentProgressing(d, &st):
			// The policy let it go on: the deadline counts from now, as
			// from a resume.
			setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionUnknown, ReasonRolloutWaveAdmitted,
				fmt.Sprintf("Deployment %q goes on with its staged rollout.", d.Name), now))
		case deploymentComplete(d, &st):
			msg := fmt.Sprintf("Deployment %q has successfully progressed.", d.Name)
			if newRS != nil {
				msg = fmt.Sprintf("ReplicaSet %q has successfully progressed.", newRS.Name)
			}
			setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, ReasonNewReplicaSetAvailable, msg, now))
		case deploymentProgressing(d, &st):
			msg := fmt.Sprintf("Deployment %q is progressing.", d.Name)
			if newRS != nil {
				msg = fmt.Sprintf("ReplicaSet %q is progressing.", newRS.Name)
			}
			cond := newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, ReasonReplicaSetUpdated, msg, now)
			// Progress refreshes lastUpdateTime even with the same reason:
			// that is what the deadline is measured from.
			if cur != nil {
				if cur.Status == corev1.ConditionTrue {
					cond.LastTransitionTime = cur.LastTransitionTime
				}
				removeCondition(&st, appsv1.DeploymentProgressing)
			}
			setCondition(&st, cond)
		case deploymentTimedOut(d, &st, now):
			msg := fmt.Sprintf("Deployment %q has timed out progressing.", d.Name)
			if newRS != nil {
				msg = fmt.Sprintf("ReplicaSet %q has timed out progressing.", newRS.Name)
			}
			setCondition(&st, newCondition(appsv1.DeploymentProgressing, corev1.ConditionFalse, ReasonProgressDeadlineExceeded, msg, now))
		}
	}
	if fc := replicaFailure(all, newRS, now); fc != nil {
		setCondition(&st, *fc)
	} else {
		removeCondition(&st, appsv1.DeploymentReplicaFailure)
	}
	if apiequality.Semantic.DeepEqual(d.Status, st) {
		s.requeueStuck(st)
		return nil
	}
	d.Status = st
	return s.updateStatus(ctx)
}

// replicaFailure lifts a ReplicaSet's ReplicaFailure condition (the new
// one's first) to the Deployment.
func replicaFailure(all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, now time.Time) *appsv1.DeploymentCondition {
	order := []*appsv1.ReplicaSet{newRS}
	order = append(order, all...)
	for _, rs := range order {
		if rs == nil {
			continue
		}
		for _, c := range rs.Status.Conditions {
			if c.Type == appsv1.ReplicaSetReplicaFailure {
				dc := appsv1.DeploymentCondition{Type: appsv1.DeploymentReplicaFailure, Status: c.Status, Reason: c.Reason,
					Message: c.Message, LastUpdateTime: metav1.NewTime(now), LastTransitionTime: c.LastTransitionTime}
				return &dc
			}
		}
	}
	return nil
}

// requeueStuck looks again when the progress deadline will pass, since
// no event will announce that nothing happened.
func (s *step) requeueStuck(st appsv1.DeploymentStatus) {
	d := s.d
	cur := getCondition(d.Status, appsv1.DeploymentProgressing)
	if !hasProgressDeadline(d) || cur == nil {
		return
	}
	if deploymentComplete(d, &st) || cur.Reason == ReasonProgressDeadlineExceeded || cur.Reason == ReasonWaitingForRolloutWave {
		return
	}
	after := cur.LastUpdateTime.Add(time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second).Sub(s.now())
	if after < time.Second {
		s.c.loop.Queue().AddRateLimited(controlloop.ObjectKey(d))
		return
	}
	s.c.loop.EnqueueAfter(controlloop.ObjectKey(d), after+time.Second)
}

// ---- rolling update ----

func (s *step) rolloutRolling(ctx context.Context, rsList []*appsv1.ReplicaSet) error {
	newRS, olds, err := s.getAllReplicaSetsAndSyncRevision(ctx, rsList, true)
	if err != nil {
		return err
	}
	all := append(append([]*appsv1.ReplicaSet(nil), olds...), newRS)

	scaledUp, err := s.reconcileNewReplicaSet(ctx, all, newRS)
	if err != nil {
		return err
	}
	if scaledUp {
		return s.syncRolloutStatus(ctx, all, newRS)
	}
	scaledDown, err := s.reconcileOldReplicaSets(ctx, all, activeRSs(olds), newRS)
	if err != nil {
		return err
	}
	if scaledDown {
		return s.syncRolloutStatus(ctx, all, newRS)
	}
	if deploymentComplete(s.d, &s.d.Status) {
		if err := s.cleanup(ctx, olds); err != nil {
			return err
		}
	}
	return s.syncRolloutStatus(ctx, all, newRS)
}

func (s *step) reconcileNewReplicaSet(ctx context.Context, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) (bool, error) {
	want := desiredReplicas(s.d)
	if rsReplicas(newRS) == want {
		return false, nil
	}
	if rsReplicas(newRS) > want {
		scaled, _, err := s.scaleRS(ctx, newRS, want)
		return scaled, err
	}
	scaled, _, err := s.scaleRS(ctx, newRS, NewRSNewReplicas(s.d, all, newRS))
	return scaled, err
}

func (s *step) reconcileOldReplicaSets(ctx context.Context, all, olds []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) (bool, error) {
	oldPods := sumSpecReplicas(olds)
	if oldPods == 0 {
		return false, nil
	}
	allPods := sumSpecReplicas(all)
	minAvailable := desiredReplicas(s.d) - MaxUnavailable(s.d)
	newUnavailable := rsReplicas(newRS) - newRS.Status.AvailableReplicas
	maxScaledDown := allPods - minAvailable - newUnavailable
	if maxScaledDown <= 0 {
		return false, nil
	}
	// Unhealthy old replicas first: they cost no availability.
	olds, cleaned, err := s.cleanupUnhealthyReplicas(ctx, olds, maxScaledDown)
	if err != nil {
		return false, err
	}
	all = append(append([]*appsv1.ReplicaSet(nil), olds...), newRS)
	scaled, err := s.scaleDownOldForRollingUpdate(ctx, all, olds)
	if err != nil {
		return false, err
	}
	return cleaned+scaled > 0, nil
}

func (s *step) cleanupUnhealthyReplicas(ctx context.Context, olds []*appsv1.ReplicaSet, maxCleanup int32) ([]*appsv1.ReplicaSet, int32, error) {
	olds = append([]*appsv1.ReplicaSet(nil), olds...)
	byCreation(olds)
	var total int32
	for i, rs := range olds {
		if total >= maxCleanup {
			break
		}
		if rsReplicas(rs) == 0 || rsReplicas(rs) == rs.Status.AvailableReplicas {
			continue
		}
		n := min(maxCleanup-total, rsReplicas(rs)-rs.Status.AvailableReplicas)
		_, updated, err := s.scaleRS(ctx, rs, rsReplicas(rs)-n)
		if err != nil {
			return nil, total, err
		}
		total += n
		olds[i] = updated
	}
	return olds, total, nil
}

func (s *step) scaleDownOldForRollingUpdate(ctx context.Context, all, olds []*appsv1.ReplicaSet) (int32, error) {
	minAvailable := desiredReplicas(s.d) - MaxUnavailable(s.d)
	available := sumStatus(all, statusAvailable)
	if available <= minAvailable {
		return 0, nil
	}
	olds = append([]*appsv1.ReplicaSet(nil), olds...)
	byCreation(olds)
	toScale := available - minAvailable
	var total int32
	for _, rs := range olds {
		if total >= toScale {
			break
		}
		if rsReplicas(rs) == 0 {
			continue
		}
		n := min(rsReplicas(rs), toScale-total)
		if _, _, err := s.scaleRS(ctx, rs, rsReplicas(rs)-n); err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// ---- recreate ----

func (s *step) rolloutRecreate(ctx context.Context, rsList []*appsv1.ReplicaSet) error {
	newRS, olds, err := s.getAllReplicaSetsAndSyncRevision(ctx, rsList, false)
	if err != nil {
		return err
	}
	all := append(append([]*appsv1.ReplicaSet(nil), olds...), newRS)
	scaledDown := false
	for _, rs := range activeRSs(olds) {
		scaled, _, err := s.scaleRS(ctx, rs, 0)
		if err != nil {
			return err
		}
		scaledDown = scaledDown || scaled
	}
	if scaledDown {
		return s.syncRolloutStatus(ctx, all, newRS)
	}
	running, err := s.oldPodsRunning(newRS, olds)
	if err != nil {
		return err
	}
	if running {
		return s.syncRolloutStatus(ctx, all, newRS)
	}
	if newRS == nil {
		newRS, olds, err = s.getAllReplicaSetsAndSyncRevision(ctx, rsList, true)
		if err != nil {
			return err
		}
		all = append(append([]*appsv1.ReplicaSet(nil), olds...), newRS)
	}
	if _, _, err := s.scaleRS(ctx, newRS, desiredReplicas(s.d)); err != nil {
		return err
	}
	if deploymentComplete(s.d, &s.d.Status) {
		if err := s.cleanup(ctx, olds); err != nil {
			return err
		}
	}
	return s.syncRolloutStatus(ctx, all, newRS)
}

// oldPodsRunning: an old ReplicaSet still reports pods, or a pod of one
// is in the cache and not finished.
func (s *step) oldPodsRunning(newRS *appsv1.ReplicaSet, olds []*appsv1.ReplicaSet) (bool, error) {
	if sumStatus(olds, statusReplicas) > 0 {
		return true, nil
	}
	oldUIDs := map[types.UID]bool{}
	for _, rs := range olds {
		oldUIDs[rs.UID] = true
	}
	pods, err := s.c.podLister.Pods(s.d.Namespace).List(labels.Everything())
	if err != nil {
		return false, err
	}
	for _, p := range pods {
		ref := metav1.GetControllerOfNoCopy(p)
		if ref == nil || !oldUIDs[ref.UID] || (newRS != nil && ref.UID == newRS.UID) {
			continue
		}
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return true, nil
		}
	}
	return false, nil
}

// ---- scaling (paused, or replicas changed mid-rollout) ----

func (s *step) isScalingEvent(ctx context.Context, rsList []*appsv1.ReplicaSet) (bool, error) {
	newRS, olds, err := s.getAllReplicaSetsAndSyncRevision(ctx, rsList, false)
	if err != nil {
		return false, err
	}
	for _, rs := range activeRSs(append(olds, newRS)) {
		if desired, ok := intAnnotation(rs, AnnotationDesiredReplicas); ok && desired != desiredReplicas(s.d) {
			return true, nil
		}
	}
	return false, nil
}

func (s *step) scaleOnly(ctx context.Context, rsList []*appsv1.ReplicaSet) error {
	newRS, olds, err := s.getAllReplicaSetsAndSyncRevision(ctx, rsList, false)
	if err != nil {
		return err
	}
	if err := s.scale(ctx, newRS, olds); err != nil {
		return err
	}
	if s.d.Spec.Paused {
		if err := s.cleanup(ctx, olds); err != nil {
			return err
		}
	}
	return s.syncDeploymentStatus(ctx, append(olds, newRS), newRS)
}

// scale resizes a Deployment's ReplicaSets to a new spec.replicas,
// proportionally to their sizes when a rollout is under way.
func (s *step) scale(ctx context.Context, newRS *appsv1.ReplicaSet, olds []*appsv1.ReplicaSet) error {
	d := s.d
	if rs := findActiveOrLatest(newRS, olds); rs != nil {
		if rsReplicas(rs) == desiredReplicas(d) {
			return nil
		}
		_, _, err := s.scaleRS(ctx, rs, desiredReplicas(d))
		return err
	}
	if isSaturated(d, newRS) {
		for _, rs := range activeRSs(olds) {
			if _, _, err := s.scaleRS(ctx, rs, 0); err != nil {
				return err
			}
		}
		return nil
	}
	if !isRollingUpdate(d) {
		return nil
	}
	all := activeRSs(append(append([]*appsv1.ReplicaSet(nil), olds...), newRS))
	allowed := int32(0)
	if desiredReplicas(d) > 0 {
		allowed = desiredReplicas(d) + MaxSurge(d)
	}
	toAdd := allowed - sumSpecReplicas(all)
	op := ""
	switch {
	case toAdd > 0:
		// Largest first; among equals the newer gets the extra replicas.
		sort.SliceStable(all, func(i, j int) bool {
			if rsReplicas(all[i]) == rsReplicas(all[j]) {
				return all[j].CreationTimestamp.Before(&all[i].CreationTimestamp)
			}
			return rsReplicas(all[i]) > rsReplicas(all[j])
		})
		op = "up"
	case toAdd < 0:
		// Largest first; among equals the older loses replicas first.
		sort.SliceStable(all, func(i, j int) bool {
			if rsReplicas(all[i]) == rsReplicas(all[j]) {
				return all[i].CreationTimestamp.Before(&all[j].CreationTimestamp)
			}
			return rsReplicas(all[i]) > rsReplicas(all[j])
		})
		op = "down"
	}
	added := int32(0)
	sizes := make(map[string]int32, len(all))
	for _, rs := range all {
		if toAdd != 0 {
			p := proportion(rs, d, toAdd, added)
			sizes[rs.Name] = rsReplicas(rs) + p
			added += p
		} else {
			sizes[rs.Name] = rsReplicas(rs)
		}
	}
	for i, rs := range all {
		if i == 0 && toAdd != 0 {
			sizes[rs.Name] = max(sizes[rs.Name]+toAdd-added, 0)
		}
		if _, _, err := s.scaleRSWith(ctx, rs, sizes[rs.Name], op); err != nil {
			return err
		}
	}
	return nil
}

// ---- history ----

// cleanup deletes the oldest old ReplicaSets beyond revisionHistoryLimit,
// only those scaled to zero with no pods left.
func (s *step) cleanup(ctx context.Context, olds []*appsv1.ReplicaSet) error {
	if s.d.Spec.RevisionHistoryLimit == nil {
		return nil
	}
	var alive []*appsv1.ReplicaSet
	for _, rs := range olds {
		if rs != nil && rs.DeletionTimestamp == nil {
			alive = append(alive, rs)
		}
	}
	diff := len(alive) - int(*s.d.Spec.RevisionHistoryLimit)
	if diff <= 0 {
		return nil
	}
	sort.SliceStable(alive, func(i, j int) bool {
		ri, _ := Revision(alive[i])
		rj, _ := Revision(alive[j])
		if ri == rj {
			return alive[i].CreationTimestamp.Before(&alive[j].CreationTimestamp)
		}
		return ri < rj
	})
	for _, rs := range alive[:diff] {
		if rs.Status.Replicas != 0 || rsReplicas(rs) != 0 || rs.Generation > rs.Status.ObservedGeneration {
			continue
		}
		err := s.c.client.AppsV1().ReplicaSets(rs.Namespace).Delete(ctx, rs.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &rs.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete old replicaset %s/%s: %w", rs.Namespace, rs.Name, err)
		}
	}
	return nil
}
