package daemonset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/podutil"
	"flotilla.dev/flotilla/hub/controllers/controllerutil"
	"flotilla.dev/flotilla/internal/controlloop"
)

// Name is the loop's name in logs, queue metrics and leader election.
const Name = "daemonset"

// Event reasons, as Kubernetes words them.
const (
	ReasonSuccessfulCreate = controllerutil.ReasonSuccessfulCreate
	ReasonFailedCreate     = controllerutil.ReasonFailedCreate
	ReasonSuccessfulDelete = controllerutil.ReasonSuccessfulDelete
	ReasonFailedDelete     = controllerutil.ReasonFailedDelete
	ReasonFailedDaemonPod  = "FailedDaemonPod"
	ReasonSelectingAll     = "SelectingAll"
	// ReasonPrepull: devices were asked to pull a new revision's images.
	ReasonPrepull = "Prepull"
)

// GVK is the kind written into the ownerReferences of the pods.
var GVK = appsv1.SchemeGroupVersion.WithKind("DaemonSet")

// Options tune the loop; the zero value is production.
type Options struct {
	Clock         clock.Clock
	BurstReplicas int
	Logger        *slog.Logger
	// Rollouts, when set, stage template changes by RolloutPolicy.
	Rollouts Rollouts
}

// Controller is the DaemonSet loop.
type Controller struct {
	client     kubernetes.Interface
	dsLister   appslisters.DaemonSetLister
	podLister  corelisters.PodLister
	nodeLister corelisters.NodeLister
	revLister  appslisters.ControllerRevisionLister
	recorder   record.EventRecorder
	clock      clock.Clock
	burst      int
	log        *slog.Logger
	exp        *controllerutil.Expectations
	podControl *controllerutil.PodControl
	// failedBackoff spaces out the deletion of failed daemon pods per
	// node, so a node that keeps rejecting the pod is not hot-looped.
	failedBackoff *flowcontrol.Backoff
	loop          *controlloop.Loop
	// podEvents wakes a DaemonSet for the events of its pods.
	podEvents *controllerutil.OwnerEvents[*appsv1.DaemonSet, *corev1.Pod]
	rollouts  Rollouts
}

// New wires the loop to the factory's DaemonSet, Pod and Node informers.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, recorder record.EventRecorder, opts Options) (*Controller, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.BurstReplicas <= 0 {
		opts.BurstReplicas = 250 // Kubernetes' value for DaemonSets
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	dsInf := factory.Apps().V1().DaemonSets()
	podInf := factory.Core().V1().Pods()
	nodeInf := factory.Core().V1().Nodes()
	revInf := factory.Apps().V1().ControllerRevisions()
	c := &Controller{
		client:        client,
		dsLister:      dsInf.Lister(),
		podLister:     podInf.Lister(),
		nodeLister:    nodeInf.Lister(),
		revLister:     revInf.Lister(),
		recorder:      recorder,
		clock:         opts.Clock,
		burst:         opts.BurstReplicas,
		log:           opts.Logger.With("controller", Name),
		exp:           controllerutil.NewExpectations(opts.Clock),
		failedBackoff: flowcontrol.NewFakeBackOff(time.Second, 15*time.Minute, opts.Clock),
		rollouts:      opts.Rollouts,
	}
	c.podControl = &controllerutil.PodControl{Client: client, Recorder: recorder, Expectations: c.exp}
	c.loop = controlloop.New(Name, c.sync, controlloop.Options{Logger: opts.Logger})
	if _, err := dsInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.loop.Enqueue,
		UpdateFunc: func(_, cur any) { c.loop.Enqueue(cur) },
		DeleteFunc: func(obj any) {
			if k, err := controlloop.Key(obj); err == nil {
				c.exp.Delete(k)
				c.loop.EnqueueKey(k)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("daemonset informer: %w", err)
	}
	c.podEvents = &controllerutil.OwnerEvents[*appsv1.DaemonSet, *corev1.Pod]{
		Kind: GVK.Kind,
		Get: func(ns, name string) (*appsv1.DaemonSet, error) {
			return c.dsLister.DaemonSets(ns).Get(name)
		},
		Matching:             c.dsLister.GetPodDaemonSets,
		Loop:                 c.loop,
		Expectations:         c.exp,
		TerminatingIsDeleted: true,
		Recheck: func(ds *appsv1.DaemonSet, old, cur *corev1.Pod) time.Duration {
			return controllerutil.AvailableAfter(old, cur, ds.Spec.MinReadySeconds)
		},
	}
	if _, err := podInf.Informer().AddEventHandler(c.podEvents.Handler()); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	if _, err := nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.enqueueAll() },
		UpdateFunc: func(old, cur any) {
			if nodeChangeMatters(old.(*corev1.Node), cur.(*corev1.Node)) {
				c.enqueueAll()
			}
		},
		DeleteFunc: func(any) { c.enqueueAll() },
	}); err != nil {
		return nil, fmt.Errorf("node informer: %w", err)
	}
	// A revision changed or deleted by hand is put right by its owner.
	onRevision := func(obj any) {
		r, ok := controlloop.Deleted[*appsv1.ControllerRevision](obj)
		if !ok {
			return
		}
		if ref := metav1.GetControllerOfNoCopy(r); ref != nil && ref.Kind == GVK.Kind {
			c.loop.EnqueueKey(controlloop.NameKey(r.Namespace, ref.Name))
		}
	}
	if _, err := revInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onRevision, UpdateFunc: func(_, cur any) { onRevision(cur) }, DeleteFunc: onRevision,
	}); err != nil {
		return nil, fmt.Errorf("controllerrevision informer: %w", err)
	}
	c.loop.WaitFor(dsInf.Informer().HasSynced, podInf.Informer().HasSynced, nodeInf.Informer().HasSynced, revInf.Informer().HasSynced)
	if c.rollouts != nil {
		// A policy's status admits waves: its DaemonSets are synced again.
		if err := c.rollouts.OnChange(c.enqueueNamespace); err != nil {
			return nil, fmt.Errorf("rolloutpolicy informer: %w", err)
		}
		c.loop.WaitFor(c.rollouts.HasSynced)
	}
	return c, nil
}

// Run runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error { return c.loop.Run(ctx, workers) }

// nodeChangeMatters: only what decides eligibility (heartbeats are not).
func nodeChangeMatters(old, cur *corev1.Node) bool {
	return !labels.Equals(old.Labels, cur.Labels) ||
		!apiequality.Semantic.DeepEqual(old.Spec.Taints, cur.Spec.Taints) ||
		old.Spec.Unschedulable != cur.Spec.Unschedulable
}

func (c *Controller) enqueueNamespace(ns string) {
	dss, err := c.dsLister.DaemonSets(ns).List(labels.Everything())
	if err != nil {
		return
	}
	for _, ds := range dss {
		c.loop.EnqueueKey(controlloop.ObjectKey(ds))
	}
}

func (c *Controller) enqueueAll() {
	dss, err := c.dsLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, ds := range dss {
		c.loop.EnqueueKey(controlloop.ObjectKey(ds))
	}
}

// Hash is the controller-revision-hash of ds's current template.
func Hash(ds *appsv1.DaemonSet) string {
	return controllerutil.ComputeHash(&ds.Spec.Template, ds.Status.CollisionCount)
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("daemonset key %q: %w", key, err)
	}
	ds, err := c.dsLister.DaemonSets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.exp.Delete(key)
		return nil
	}
	if err != nil {
		return err
	}
	selector, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		c.log.Warn("invalid selector", "daemonset", key, "err", err)
		return nil
	}
	if selector.Empty() {
		c.recorder.Eventf(ds, corev1.EventTypeWarning, ReasonSelectingAll, "This daemon set is selecting all pods. A non-empty selector is required.")
		return nil
	}
	nodes, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		return err
	}
	hash := Hash(ds)
	if ds.DeletionTimestamp != nil || !c.exp.Satisfied(key) {
		pods, err := c.nodeToPods(ctx, ds, selector, false)
		if err != nil {
			return err
		}
		return c.updateStatus(ctx, ds, nodes, pods, hash)
	}
	pods, err := c.nodeToPods(ctx, ds, selector, true)
	if err != nil {
		return err
	}
	tg, err := c.targetsFor(ds, hash, nodes)
	if err != nil {
		return err
	}
	if err := c.manage(ctx, ds, nodes, pods, tg); err != nil {
		return err
	}
	if c.exp.Satisfied(key) && ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
		if err := c.rollingUpdate(ctx, ds, nodes, pods, tg); err != nil {
			return err
		}
	}
	if err := c.syncHistory(ctx, ds, hash, pods); err != nil {
		return err
	}
	return c.updateStatus(ctx, ds, nodes, pods, hash)
}

// nodeToPods claims ds's pods (adopting and releasing when claim is set)
// and groups them by target node. Finished pods being deleted are left out.
func (c *Controller) nodeToPods(ctx context.Context, ds *appsv1.DaemonSet, selector labels.Selector, claim bool) (map[string][]*corev1.Pod, error) {
	all, err := c.podLister.Pods(ds.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var pods []*corev1.Pod
	if claim {
		claimer := &controllerutil.Claimer[*corev1.Pod]{
			Owner: ds, OwnerGVK: GVK, Selector: selector,
			Patch: func(ctx context.Context, name string, data []byte) (*corev1.Pod, error) {
				return c.client.CoreV1().Pods(ds.Namespace).Patch(ctx, name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
			},
			CanAdopt: controllerutil.StillOwner(ds, func(ctx context.Context) (metav1.Object, error) {
				return c.client.AppsV1().DaemonSets(ds.Namespace).Get(ctx, ds.Name, metav1.GetOptions{})
			}),
		}
		if pods, err = claimer.Claim(ctx, all); err != nil {
			return nil, err
		}
	} else {
		for _, p := range all {
			if ref := metav1.GetControllerOfNoCopy(p); ref != nil && ref.UID == ds.UID {
				pods = append(pods, p)
			}
		}
	}
	out := map[string][]*corev1.Pod{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) {
			continue
		}
		if n := TargetNode(p); n != "" {
			out[n] = append(out[n], p)
		}
	}
	return out, nil
}

// manage creates the missing daemon pods and deletes the surplus ones.
func (c *Controller) manage(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, nodePods map[string][]*corev1.Pod, tg *targets) error {
	var create []string
	var del []*corev1.Pod
	known := map[string]bool{}
	for _, node := range nodes {
		known[node.Name] = true
		c2, d := c.podsShouldBeOnNode(ds, node, nodePods[node.Name], tg.of(node.Name, nodePods[node.Name]).hash)
		if c2 {
			create = append(create, node.Name)
		}
		del = append(del, d...)
	}
	// Pods for nodes that are gone will never run.
	for node, pods := range nodePods {
		if known[node] {
			continue
		}
		for _, p := range pods {
			if p.DeletionTimestamp == nil {
				del = append(del, p)
			}
		}
	}
	return c.syncNodes(ctx, ds, del, create, tg)
}

// podsShouldBeOnNode decides one node: whether a pod must be created and
// which pods must go.
func (c *Controller) podsShouldBeOnNode(ds *appsv1.DaemonSet, node *corev1.Node, pods []*corev1.Pod, hash string) (bool, []*corev1.Pod) {
	shouldRun, shouldContinue := ShouldRun(ds, node)
	var del []*corev1.Pod
	switch {
	case shouldRun && len(pods) == 0:
		return true, nil
	case shouldContinue:
		var running []*corev1.Pod
		for _, p := range pods {
			if p.DeletionTimestamp != nil {
				continue
			}
			if p.Status.Phase == corev1.PodFailed {
				bk := string(ds.UID) + "/" + node.Name
				now := c.clock.Now()
				if c.failedBackoff.IsInBackOffSinceUpdate(bk, now) {
					c.loop.EnqueueAfter(controlloop.ObjectKey(ds), c.failedBackoff.Get(bk))
					continue
				}
				c.failedBackoff.Next(bk, now)
				c.recorder.Eventf(ds, corev1.EventTypeWarning, ReasonFailedDaemonPod, "Found failed daemon pod %s/%s on node %s, will try to kill it", p.Namespace, p.Name, node.Name)
				del = append(del, p)
				continue
			}
			running = append(running, p)
		}
		if shouldRun && len(running) == 0 && len(del) > 0 {
			// Every pod there failed: a fresh one replaces it.
			return true, del
		}
		if len(running) <= 1 {
			return false, del
		}
		oldestFirst(running)
		if maxSurge(ds, 1) == 0 {
			return false, append(del, running[1:]...)
		}
		// Surging: an old and a new pod may share a node while the new
		// one is not yet available; anything beyond that goes.
		var newest, oldest *corev1.Pod
		for _, p := range running {
			if p.Labels[appsv1.ControllerRevisionHashLabelKey] == hash {
				if newest == nil {
					newest = p
					continue
				}
			} else if oldest == nil {
				oldest = p
				continue
			}
			del = append(del, p)
		}
		if newest != nil && oldest != nil {
			if !podutil.IsReady(oldest) || podutil.IsAvailable(newest, ds.Spec.MinReadySeconds, c.clock.Now()) {
				del = append(del, oldest)
			}
		}
		return false, del
	default:
		for _, p := range pods {
			if p.DeletionTimestamp == nil {
				del = append(del, p)
			}
		}
		return false, del
	}
}

// newPod is ds's pod of revision t for node, unbound and pinned to node.
func newPod(ds *appsv1.DaemonSet, node string, t target) *corev1.Pod {
	tmpl, hash := t.tmpl.DeepCopy(), t.hash
	if tmpl.Labels == nil {
		tmpl.Labels = map[string]string{}
	}
	tmpl.Labels[appsv1.ControllerRevisionHashLabelKey] = hash
	pod := controllerutil.PodFromTemplate(tmpl, ds, GVK)
	pod.Spec.Affinity = PinToNode(pod.Spec.Affinity, node)
	AddDaemonTolerations(&pod.Spec)
	return pod
}

// syncNodes deletes del and creates a pod for each node in create, with
// expectations so the next sync waits until the cache has seen them.
func (c *Controller) syncNodes(ctx context.Context, ds *appsv1.DaemonSet, del []*corev1.Pod, create []string, tg *targets) error {
	key := controlloop.ObjectKey(ds)
	create = create[:min(len(create), c.burst)]
	del = del[:min(len(del), c.burst)]
	if len(create) == 0 && len(del) == 0 {
		return nil
	}
	delKeys := make([]string, len(del))
	for i, p := range del {
		delKeys[i] = controlloop.ObjectKey(p)
	}
	c.exp.Expect(key, len(create), delKeys)
	_, createErr := c.podControl.CreatePods(ctx, ds, key, len(create), func(i int) (*corev1.Pod, error) {
		return newPod(ds, create[i], tg.of(create[i], nil)), nil
	})
	return errors.Join(createErr, c.podControl.DeletePods(ctx, ds, key, del))
}

func desiredCount(ds *appsv1.DaemonSet, nodes []*corev1.Node) int {
	n := 0
	for _, node := range nodes {
		if run, _ := ShouldRun(ds, node); run {
			n++
		}
	}
	return n
}

func maxSurge(ds *appsv1.DaemonSet, desired int) int {
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType || ru == nil || ru.MaxSurge == nil {
		return 0
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxSurge, desired, true)
	if err != nil {
		return 0
	}
	return n
}

func maxUnavailable(ds *appsv1.DaemonSet, desired int) int {
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	v := intstr.FromInt32(1) // the API's default
	if ru != nil && ru.MaxUnavailable != nil {
		v = *ru.MaxUnavailable
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, desired, true)
	if err != nil {
		return 1
	}
	return n
}

// updatedAndOld splits a node's live pods into the updated one and the
// old one; ok is false with more than one of either (manage cleans up).
func updatedAndOld(pods []*corev1.Pod, hash string) (updated, old *corev1.Pod, ok bool) {
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] == hash {
			if updated != nil {
				return nil, nil, false
			}
			updated = p
		} else {
			if old != nil {
				return nil, nil, false
			}
			old = p
		}
	}
	return updated, old, true
}

// rollingUpdate replaces old pods within maxUnavailable (deleting old
// pods; manage creates the new ones) or within maxSurge (creating new pods
// beside old ones and deleting each old pod once its successor is
// available).
func (c *Controller) rollingUpdate(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, nodePods map[string][]*corev1.Pod, tg *targets) error {
	desired := desiredCount(ds, nodes)
	surge, unavail := maxSurge(ds, desired), maxUnavailable(ds, desired)
	if desired > 0 && surge == 0 && unavail == 0 {
		unavail = 1
	}
	now := c.clock.Now()
	available := func(p *corev1.Pod) bool { return podutil.IsAvailable(p, ds.Spec.MinReadySeconds, now) }
	byName := map[string]*corev1.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}

	if surge == 0 {
		// With prepull, an old pod is stopped only once its device says
		// the new images are present and verified: until then it is
		// asked to pull them, costing no availability, and a device that
		// cannot (a refused signature, no link) keeps its old pod.
		prepull := ds.Annotations[api.AnnotationPrepull] == "true"
		numUnavailable := 0
		var replace, candidates, announce []*corev1.Pod
		announceImages := map[*corev1.Pod]string{}
		for _, np := range sortedNodesNamed(nodePods) {
			t := tg.of(np.node, np.pods)
			images := ""
			if prepull {
				images = templateImages(&t.tmpl.Spec)
			}
			updated, old, ok := updatedAndOld(np.pods, t.hash)
			switch {
			case !ok:
				numUnavailable++
			case (old == nil && updated == nil) || (old != nil && updated != nil):
				numUnavailable++
			case updated != nil:
				if !available(updated) {
					numUnavailable++
				}
			case !available(old):
				replace = append(replace, old) // costs no availability
			case prepull && !Prepulled(old, images):
				if old.Annotations[api.AnnotationPrepullImages] != images {
					announce = append(announce, old)
					announceImages[old] = images
				}
			case numUnavailable < unavail:
				candidates = append(candidates, old)
			}
		}
		room := min(max(unavail-numUnavailable, 0), len(candidates))
		return errors.Join(c.announce(ctx, ds, announce, announceImages), c.syncNodes(ctx, ds, append(replace, candidates[:room]...), nil, tg))
	}

	var del, sunset []*corev1.Pod
	var allowed, candidates []string
	numSurge, numAvailable := 0, 0
	for _, pods := range sortedNodesNamed(nodePods) {
		updated, old, ok := updatedAndOld(pods.pods, tg.of(pods.node, pods.pods).hash)
		if !ok {
			numSurge++
			continue
		}
		if (old != nil && available(old)) || (old == nil && updated != nil && available(updated)) {
			numAvailable++
		}
		switch {
		case old == nil:
		case updated == nil:
			n := byName[pods.node]
			run := false
			if n != nil {
				run, _ = ShouldRun(ds, n)
			}
			switch {
			case !available(old):
				if !run {
					del = append(del, old)
					continue
				}
				allowed = append(allowed, pods.node)
			case !run:
				sunset = append(sunset, old)
			case numSurge < surge:
				candidates = append(candidates, pods.node)
			}
		default:
			if !available(updated) {
				numSurge++
				continue
			}
			del = append(del, old)
		}
	}
	// Pods on nodes that no longer fit go only once enough others are
	// available elsewhere: surge promises full availability.
	if n := min(numAvailable-desired, len(sunset)); n > 0 {
		del = append(del, sunset[:n]...)
	}
	room := min(max(surge-numSurge, 0), len(candidates))
	return c.syncNodes(ctx, ds, del, append(allowed, candidates[:room]...), tg)
}

// templateImages lists the images a pod of the template needs, in order,
// once each: what AnnotationPrepullImages announces.
func templateImages(spec *corev1.PodSpec) string {
	var out []string
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range list {
			if !slices.Contains(out, c.Image) {
				out = append(out, c.Image)
			}
		}
	}
	return strings.Join(out, ",")
}

// Prepulled reports whether the pod's device has the announced images
// present and verified.
func Prepulled(p *corev1.Pod, images string) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == api.ConditionImagesPrepulled {
			return c.Status == corev1.ConditionTrue && c.Message == images
		}
	}
	return false
}

// announce asks the devices of old pods to pull the next revision's
// images, by annotating the pods (their devices watch them).
func (c *Controller) announce(ctx context.Context, ds *appsv1.DaemonSet, pods []*corev1.Pod, images map[*corev1.Pod]string) error {
	pods = pods[:min(len(pods), c.burst)]
	var errs []error
	told := map[string]int{}
	for _, p := range pods {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{api.AnnotationPrepullImages: images[p]}}})
		if err != nil {
			return err
		}
		_, err = c.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("announce the next images to pod %s: %w", controlloop.ObjectKey(p), err))
			continue
		}
		told[images[p]]++
	}
	// One event per set of images: a staged rollout announces the
	// previous revision's images to devices outside admitted waves.
	for _, imgs := range slices.Sorted(maps.Keys(told)) {
		c.recorder.Eventf(ds, corev1.EventTypeNormal, ReasonPrepull, "Asked %d device(s) to pull %s before their pods are replaced", told[imgs], imgs)
	}
	return errors.Join(errs...)
}

type nodePods struct {
	node string
	pods []*corev1.Pod
}

// sortedNodesNamed iterates nodes in name order: decisions bounded by a
// budget must not depend on map order.
func sortedNodesNamed(m map[string][]*corev1.Pod) []nodePods {
	out := make([]nodePods, 0, len(m))
	for n, p := range m {
		out = append(out, nodePods{n, p})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].node < out[j].node })
	return out
}

// updateStatus writes the counts Kubernetes reports.
func (c *Controller) updateStatus(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, nodePods map[string][]*corev1.Pod, hash string) error {
	now := c.clock.Now()
	var desired, current, ready, available, updated, misscheduled int32
	for _, node := range nodes {
		run, _ := ShouldRun(ds, node)
		pods := nodePods[node.Name]
		if !run {
			if len(pods) > 0 {
				misscheduled++
			}
			continue
		}
		desired++
		if len(pods) == 0 {
			continue
		}
		current++
		sorted := append([]*corev1.Pod(nil), pods...)
		oldestFirst(sorted)
		p := sorted[0]
		if podutil.IsReady(p) {
			ready++
			if podutil.IsAvailable(p, ds.Spec.MinReadySeconds, now) {
				available++
			}
		}
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] == hash {
			updated++
		}
	}
	st := ds.Status.DeepCopy()
	st.DesiredNumberScheduled = desired
	st.CurrentNumberScheduled = current
	st.NumberReady = ready
	st.NumberAvailable = available
	st.NumberUnavailable = desired - available
	st.UpdatedNumberScheduled = updated
	st.NumberMisscheduled = misscheduled
	st.ObservedGeneration = ds.Generation
	if ds.Spec.MinReadySeconds > 0 && ready != available {
		c.loop.EnqueueAfter(controlloop.ObjectKey(ds), time.Duration(ds.Spec.MinReadySeconds)*time.Second)
	}
	if apiequality.Semantic.DeepEqual(&ds.Status, st) {
		return nil
	}
	cp := ds.DeepCopy()
	cp.Status = *st
	if _, err := c.client.AppsV1().DaemonSets(ds.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update status of daemonset %s: %w", controlloop.ObjectKey(ds), err)
	}
	return nil
}
