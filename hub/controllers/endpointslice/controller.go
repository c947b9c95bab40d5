package endpointslice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/podutil"
	"flotilla.dev/flotilla/hub/controllers/controllerutil"
	"flotilla.dev/flotilla/internal/controlloop"
)

// Name is the loop's name in logs, queue metrics and leader election.
const Name = "endpointslice"

// Event reasons.
const (
	ReasonFailedToUpdateEndpointSlices = "FailedToUpdateEndpointSlices"
)

// Options tune the loop; the zero value is production.
type Options struct {
	// MaxEndpointsPerSlice; 0 means MaxEndpointsPerSlice.
	MaxEndpointsPerSlice int
	Clock                clock.Clock
	Logger               *slog.Logger
}

// Controller is the EndpointSlice loop.
type Controller struct {
	client      kubernetes.Interface
	svcLister   corelisters.ServiceLister
	podLister   corelisters.PodLister
	nodeLister  corelisters.NodeLister
	sliceLister discoverylisters.EndpointSliceLister
	recorder    record.EventRecorder
	maxPer      int
	log         *slog.Logger
	loop        *controlloop.Loop
	// exp holds the slice creations and deletions not yet seen by the
	// slice informer: acting before they are seen would duplicate slices.
	exp *controllerutil.Expectations
}

// New wires the loop to the factory's Service, Pod, Node and EndpointSlice
// informers.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, recorder record.EventRecorder, opts Options) (*Controller, error) {
	if opts.MaxEndpointsPerSlice <= 0 {
		opts.MaxEndpointsPerSlice = MaxEndpointsPerSlice
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	svcInf := factory.Core().V1().Services()
	podInf := factory.Core().V1().Pods()
	nodeInf := factory.Core().V1().Nodes()
	sliceInf := factory.Discovery().V1().EndpointSlices()
	c := &Controller{
		client:      client,
		svcLister:   svcInf.Lister(),
		podLister:   podInf.Lister(),
		nodeLister:  nodeInf.Lister(),
		sliceLister: sliceInf.Lister(),
		recorder:    recorder,
		maxPer:      opts.MaxEndpointsPerSlice,
		log:         opts.Logger.With("controller", Name),
		exp:         controllerutil.NewExpectations(opts.Clock),
	}
	c.loop = controlloop.New(Name, c.sync, controlloop.Options{Logger: opts.Logger})
	if _, err := svcInf.Informer().AddEventHandler(c.loop.Handler()); err != nil {
		return nil, fmt.Errorf("service informer: %w", err)
	}
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueForPod(obj, nil) },
		UpdateFunc: func(old, cur any) { c.enqueueForPod(cur, old) },
		DeleteFunc: func(obj any) { c.enqueueForPod(obj, nil) },
	}); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	if _, err := sliceInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.sliceEvent(obj, true, false) },
		UpdateFunc: func(_, cur any) { c.sliceEvent(cur, false, false) },
		DeleteFunc: func(obj any) { c.sliceEvent(obj, false, true) },
	}); err != nil {
		return nil, fmt.Errorf("endpointslice informer: %w", err)
	}
	// Nodes give zones, which are sites: a device moved to another site
	// moves its endpoints to that site's slices. Rare, so every Service
	// is looked at again.
	if _, err := nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Node)
			n, ok2 := cur.(*corev1.Node)
			if ok1 && ok2 && api.SiteOf(o) != api.SiteOf(n) {
				c.enqueueAll()
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("node informer: %w", err)
	}
	c.loop.WaitFor(svcInf.Informer().HasSynced, podInf.Informer().HasSynced,
		nodeInf.Informer().HasSynced, sliceInf.Informer().HasSynced)
	return c, nil
}

// Run runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error { return c.loop.Run(ctx, workers) }

func (c *Controller) enqueueAll() {
	svcs, err := c.svcLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, svc := range svcs {
		c.loop.EnqueueKey(controlloop.ObjectKey(svc))
	}
}

// enqueueForPod wakes the Services that select the pod now or selected it
// before the change. Changes no endpoint can reflect are ignored.
func (c *Controller) enqueueForPod(obj, oldObj any) {
	pod, ok := controlloop.Deleted[*corev1.Pod](obj)
	if !ok {
		return
	}
	var old *corev1.Pod
	if oldObj != nil {
		old, _ = controlloop.Deleted[*corev1.Pod](oldObj)
		if old != nil && !endpointRelevantChange(old, pod) {
			return
		}
	}
	svcs, err := c.svcLister.Services(pod.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, svc := range svcs {
		if svc.Spec.Selector == nil {
			continue
		}
		sel := labels.SelectorFromValidatedSet(svc.Spec.Selector)
		if sel.Matches(labels.Set(pod.Labels)) || (old != nil && sel.Matches(labels.Set(old.Labels))) {
			c.loop.EnqueueKey(controlloop.ObjectKey(svc))
		}
	}
}

func endpointRelevantChange(old, cur *corev1.Pod) bool {
	return !labels.Equals(old.Labels, cur.Labels) ||
		old.Status.PodIP != cur.Status.PodIP ||
		len(old.Status.PodIPs) != len(cur.Status.PodIPs) ||
		podutil.IsReady(old) != podutil.IsReady(cur) ||
		(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) ||
		old.Spec.NodeName != cur.Spec.NodeName ||
		old.Status.Phase != cur.Status.Phase ||
		old.Spec.Hostname != cur.Spec.Hostname || old.Spec.Subdomain != cur.Spec.Subdomain
}

// sliceEvent wakes the owning Service: a slice someone edited or deleted
// is put back, and expected writes are counted as seen.
func (c *Controller) sliceEvent(obj any, added, deleted bool) {
	s, ok := controlloop.Deleted[*discoveryv1.EndpointSlice](obj)
	if !ok || s.Labels[api.LabelManagedBy] != ManagedBy {
		return
	}
	svc := s.Labels[api.LabelServiceName]
	if svc == "" {
		return
	}
	key := controlloop.NameKey(s.Namespace, svc)
	switch {
	case added:
		c.exp.CreationObserved(key)
	case deleted:
		c.exp.DeletionObserved(key, controlloop.ObjectKey(s))
	}
	c.loop.EnqueueKey(key)
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("service key %q: %w", key, err)
	}
	svc, err := c.svcLister.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		// The garbage collector removes the slices with their owner.
		c.exp.Delete(key)
		return nil
	}
	if err != nil {
		return err
	}
	if svc.Spec.Selector == nil && svc.Spec.Type != corev1.ServiceTypeExternalName {
		return nil // endpoints are managed by hand
	}
	if !c.exp.Satisfied(key) {
		// Our own writes are not in the cache yet; their events requeue us.
		return nil
	}
	existing, err := c.ownSlices(svc)
	if err != nil {
		return err
	}
	var plan Plan
	if svc.Spec.Type == corev1.ServiceTypeExternalName || svc.DeletionTimestamp != nil {
		plan.Delete = existing
	} else {
		pods, err := c.podLister.Pods(ns).List(labels.SelectorFromValidatedSet(svc.Spec.Selector))
		if err != nil {
			return err
		}
		want := Desired(svc, pods, c.zone)
		plan = Reconcile(svc, want, existing, c.maxPer)
	}
	if err := c.apply(ctx, svc, key, plan); err != nil {
		c.recorder.Eventf(svc, corev1.EventTypeWarning, ReasonFailedToUpdateEndpointSlices, "Error updating Endpoint Slices for Service %s/%s: %v", ns, name, err)
		return err
	}
	return nil
}

// ownSlices are this loop's slices for svc (by label and owner).
func (c *Controller) ownSlices(svc *corev1.Service) ([]*discoveryv1.EndpointSlice, error) {
	sel := labels.SelectorFromSet(labels.Set{api.LabelServiceName: svc.Name, api.LabelManagedBy: ManagedBy})
	all, err := c.sliceLister.EndpointSlices(svc.Namespace).List(sel)
	if err != nil {
		return nil, err
	}
	var out []*discoveryv1.EndpointSlice
	for _, s := range all {
		// A slice of a deleted-and-recreated Service of the same name is
		// not this Service's: the garbage collector will take it.
		if ref := metav1.GetControllerOfNoCopy(s); ref != nil && ref.UID != svc.UID {
			continue
		}
		if s.DeletionTimestamp != nil {
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

func (c *Controller) zone(node string) string {
	n, err := c.nodeLister.Get(node)
	if err != nil {
		return ""
	}
	return n.Labels[api.LabelZone]
}

// apply writes the plan: creations first and deletions last, so that an
// endpoint moving between slices is never missing from all of them.
func (c *Controller) apply(ctx context.Context, svc *corev1.Service, key string, plan Plan) error {
	if len(plan.Create) == 0 && len(plan.Update) == 0 && len(plan.Delete) == 0 {
		return nil
	}
	delKeys := make([]string, len(plan.Delete))
	for i, s := range plan.Delete {
		delKeys[i] = controlloop.ObjectKey(s)
	}
	c.exp.Expect(key, len(plan.Create), delKeys)
	slices := c.client.DiscoveryV1().EndpointSlices(svc.Namespace)
	var errs []error
	for i, s := range plan.Create {
		if _, err := slices.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			// This and every later creation will never be observed.
			for range len(plan.Create) - i {
				c.exp.CreationObserved(key)
			}
			errs = append(errs, fmt.Errorf("create endpointslice for service %s: %w", key, err))
			break
		}
	}
	for _, s := range plan.Update {
		if _, err := slices.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("update endpointslice %s/%s: %w", s.Namespace, s.Name, err))
		}
	}
	for _, s := range plan.Delete {
		err := slices.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
		if err != nil {
			c.exp.DeletionObserved(key, controlloop.ObjectKey(s))
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete endpointslice %s/%s: %w", s.Namespace, s.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}
