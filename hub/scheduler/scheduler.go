package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"flotilla.dev/flotilla/api/podutil"
	"flotilla.dev/flotilla/api/scheduling"
	"flotilla.dev/flotilla/internal/controlloop"
)

// DefaultSchedulerName is the spec.schedulerName this scheduler serves by
// default, Kubernetes' own, so manifests written for Kubernetes work.
const DefaultSchedulerName = corev1.DefaultSchedulerName

// Config tunes a Scheduler; zero fields take the defaults in brackets.
type Config struct {
	// SchedulerName is the spec.schedulerName served [default-scheduler];
	// pods with an empty schedulerName are served too.
	SchedulerName string
	// TopologyKey is the node label spread across [topology.kubernetes.io/zone].
	TopologyKey string
	// PercentageOfNodesToScore: see CacheConfig [0: adaptive].
	PercentageOfNodesToScore int
	// Workers is the number of concurrent API calls (bindings and status
	// updates) in flight [64]. Placement itself is decided one pod at a
	// time so that each pod sees the previous one. A binding mostly waits
	// for the store's commit (an fsync, milliseconds to tens of them), and
	// bindings that wait together commit together: the workers bound how
	// many pods one commit can bind.
	Workers int
	// InitialBackoff and MaxBackoff bound the per-pod retry delay after a
	// failed attempt [1s, 10s], as kube-scheduler's pod backoff.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// UnschedulableTimeout is how long a pod that fit nowhere waits for a
	// node or pod change before it is tried again anyway [60s].
	UnschedulableTimeout time.Duration
	// Recorder receives the Scheduled and FailedScheduling events
	// [controlloop.NewRecorder on the clientset].
	Recorder record.EventRecorder
	// Placement, when set, narrows where pods may go (staged rollouts).
	Placement Placement
	// Clock is used for the unschedulable timeout [real clock].
	Clock  clock.WithTicker
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.SchedulerName == "" {
		c.SchedulerName = DefaultSchedulerName
	}
	if c.Workers <= 0 {
		c.Workers = 64
	}
	if c.InitialBackoff <= 0 {
		c.InitialBackoff = time.Second
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 10 * time.Second
	}
	if c.UnschedulableTimeout <= 0 {
		c.UnschedulableTimeout = 60 * time.Second
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Scheduler binds pods with an empty spec.nodeName to nodes.
type Scheduler struct {
	client    kubernetes.Interface
	factory   informers.SharedInformerFactory
	cfg       Config
	cache     *Cache
	log       *slog.Logger
	podLister corelisters.PodLister
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	recorder  record.EventRecorder
	jobs      chan func(context.Context)

	mu sync.Mutex
	// unschedulable holds the pods that fit nowhere, with when they were
	// found so, until a cluster change (or the timeout) sends them back.
	unschedulable map[string]time.Time
}

// New returns a Scheduler fed by factory's pod and node informers. Run
// starts the factory, so it may be shared with other loops.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, cfg Config) (*Scheduler, error) {
	cfg = cfg.withDefaults()
	if cfg.MaxBackoff < cfg.InitialBackoff {
		return nil, fmt.Errorf("scheduler config: MaxBackoff %s is shorter than InitialBackoff %s", cfg.MaxBackoff, cfg.InitialBackoff)
	}
	if cfg.PercentageOfNodesToScore < 0 || cfg.PercentageOfNodesToScore > 100 {
		return nil, fmt.Errorf("scheduler config: PercentageOfNodesToScore %d is outside 0..100", cfg.PercentageOfNodesToScore)
	}
	s := &Scheduler{
		client:        client,
		factory:       factory,
		cfg:           cfg,
		cache:         NewCache(CacheConfig{TopologyKey: cfg.TopologyKey, PercentageOfNodesToScore: cfg.PercentageOfNodesToScore}),
		log:           cfg.Logger.With("component", "scheduler"),
		recorder:      cfg.Recorder,
		jobs:          make(chan func(context.Context), cfg.Workers),
		unschedulable: map[string]time.Time{},
	}
	pods := factory.Core().V1().Pods()
	nodes := factory.Core().V1().Nodes()
	s.podLister = pods.Lister()
	s.queue = newActiveQueue(s.keyPriority,
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](cfg.InitialBackoff, cfg.MaxBackoff))
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.onPodAdd,
		UpdateFunc: s.onPodUpdate,
		DeleteFunc: s.onPodDelete,
	}); err != nil {
		return nil, fmt.Errorf("scheduler: pod informer handler: %w", err)
	}
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.onNodeAdd,
		UpdateFunc: s.onNodeUpdate,
		DeleteFunc: s.onNodeDelete,
	}); err != nil {
		return nil, fmt.Errorf("scheduler: node informer handler: %w", err)
	}
	s.synced = []cache.InformerSynced{pods.Informer().HasSynced, nodes.Informer().HasSynced}
	return s, nil
}

// keyPriority is the queued pod's priority, read when it is queued.
func (s *Scheduler) keyPriority(key string) int32 {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0
	}
	pod, err := s.podLister.Pods(ns).Get(name)
	if err != nil {
		return 0
	}
	return scheduling.PodPriority(pod)
}

// Cache is the scheduler's view of nodes and placed pods.
func (s *Scheduler) Cache() *Cache { return s.cache }

// Run schedules pods until ctx ends, then waits for bindings in flight.
func (s *Scheduler) Run(ctx context.Context) error {
	defer s.queue.ShutDown()
	if s.recorder == nil {
		rec, stop := controlloop.NewRecorder(ctx, s.client, s.cfg.SchedulerName)
		defer stop()
		s.recorder = rec
	}
	s.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		return nil
	}
	s.log.Info("scheduler started", "nodes", s.cache.NodeCount())

	var wg sync.WaitGroup
	for range s.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range s.jobs {
				job(ctx)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.flushLoop(ctx)
	}()
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
	}()
	for s.scheduleOne(ctx) {
	}
	close(s.jobs)
	wg.Wait()
	return nil
}

func (s *Scheduler) responsible(pod *corev1.Pod) bool {
	return pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil &&
		(pod.Spec.SchedulerName == "" || pod.Spec.SchedulerName == s.cfg.SchedulerName) &&
		!podutil.IsTerminal(pod)
}

// scheduleOne takes one pod from the queue and places it; false means the
// queue was shut down.
func (s *Scheduler) scheduleOne(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	if ctx.Err() != nil {
		// workqueue hands out what is queued even after ShutDown; a
		// stopping scheduler places nothing more.
		return false
	}

	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		s.queue.Forget(key)
		return true
	}
	pod, err := s.podLister.Pods(ns).Get(name)
	if err != nil || !s.responsible(pod) || s.cache.IsAssumed(pod) {
		// Gone, bound, or with its binding in flight: the bind outcome
		// or the next event decides what happens next.
		s.queue.Forget(key)
		return true
	}
	target, err := s.placed(pod)
	var node string
	if err == nil {
		node, err = s.cache.Schedule(target)
	}
	var fitErr *FitError
	switch {
	case err == nil:
		s.submit(ctx, func(ctx context.Context) { s.bind(ctx, key, pod, node) })
	case errors.As(err, &fitErr):
		s.preempt(ctx, key, pod, target, fitErr)
	case errors.Is(err, ErrNoNodesAvailable):
		s.markUnschedulable(ctx, key, pod, err.Error(), nil)
	case errors.Is(err, ErrAlreadyAssumed):
		s.queue.Forget(key)
	default:
		s.log.Error("scheduling failed", "pod", key, "err", err)
		s.queue.AddRateLimited(key)
	}
	return true
}

// submit hands an API call to the workers, waiting when all are busy so a
// slow hub slows scheduling down instead of queueing without bound.
func (s *Scheduler) submit(ctx context.Context, job func(context.Context)) {
	select {
	case s.jobs <- job:
	case <-ctx.Done():
	}
}

func (s *Scheduler) bind(ctx context.Context, key string, pod *corev1.Pod, node string) {
	err := s.client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}, metav1.CreateOptions{})
	if err == nil {
		s.queue.Forget(key)
		s.recorder.Eventf(pod, corev1.EventTypeNormal, "Scheduled", "Successfully assigned %s/%s to %s", pod.Namespace, pod.Name, node)
		return
	}
	s.cache.Forget(pod)
	switch {
	case apierrors.IsNotFound(err), ctx.Err() != nil:
		// Deleted meanwhile, or stopping: nothing to retry here.
	case apierrors.IsConflict(err):
		// Bound by someone else or recreated; the informer brings the truth.
		s.queue.AddRateLimited(key)
	default:
		s.log.Warn("binding failed", "pod", key, "node", node, "err", err)
		s.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedScheduling", "Binding rejected: %v", err)
		s.queue.AddRateLimited(key)
	}
}

// preempt runs when pod fits nowhere: if evicting lower-priority pods
// makes room on some node, the pod is nominated to it and the victims
// are marked (DisruptionTarget) and deleted gracefully, as kube-scheduler
// does; the pod is placed on a later attempt, once they are gone. Either
// way it is parked with the FailedScheduling message.
//
// target is pod as placed (narrowed to the devices a staged rollout
// allows it), so that no pod is evicted from a device it may not go to.
func (s *Scheduler) preempt(ctx context.Context, key string, pod, target *corev1.Pod, fitErr *FitError) {
	pr := s.cache.Preempt(target)
	msg := PreemptionMessage(fitErr, pr)
	if pr.Node == "" {
		var nominate *string
		if pod.Status.NominatedNodeName != "" && pr.Message != msgTerminatingOnTarget {
			// The nominated node will not do any more.
			clear := ""
			nominate = &clear
			s.cache.Unnominate(pod)
		}
		s.markUnschedulable(ctx, key, pod, msg, nominate)
		return
	}
	s.log.Info("preempting", "pod", key, "node", pr.Node, "victims", len(pr.Victims))
	s.cache.Nominate(pod, pr.Node)
	s.cache.MarkPreempted(pr.Victims)
	for _, v := range pr.Victims {
		s.submit(ctx, func(ctx context.Context) {
			if err := s.evict(ctx, pod, pr.Node, v); err != nil && ctx.Err() == nil {
				s.log.Warn("preempting a pod failed", "victim", v.Namespace+"/"+v.Name, "err", err)
			}
		})
	}
	node := pr.Node
	s.markUnschedulable(ctx, key, pod, msg, &node)
}

// evict marks the victim as kube-scheduler does (DisruptionTarget=True,
// reason PreemptionByScheduler), deletes it with its grace period and
// records the Preempted event.
func (s *Scheduler) evict(ctx context.Context, preemptor *corev1.Pod, node string, v Victim) error {
	pods := s.client.CoreV1().Pods(v.Namespace)
	for attempt := 0; ; attempt++ {
		victim, err := pods.Get(ctx, v.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && victim.UID != v.UID {
			return nil
		}
		if err != nil {
			return err
		}
		if victim.DeletionTimestamp != nil {
			return nil
		}
		cond := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason:             corev1.PodReasonPreemptionByScheduler,
			Message:            fmt.Sprintf("%s: preempting to accommodate a higher priority pod", s.cfg.SchedulerName),
			LastTransitionTime: metav1.NewTime(s.cfg.Clock.Now())}
		replaced := false
		for i := range victim.Status.Conditions {
			if victim.Status.Conditions[i].Type == corev1.DisruptionTarget {
				victim.Status.Conditions[i], replaced = cond, true
			}
		}
		if !replaced {
			victim.Status.Conditions = append(victim.Status.Conditions, cond)
		}
		if _, err = pods.UpdateStatus(ctx, victim, metav1.UpdateOptions{}); apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("marking %s/%s as a preemption target: %w", v.Namespace, v.Name, err)
		}
		uid := v.UID
		if err := pods.Delete(ctx, v.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s/%s: %w", v.Namespace, v.Name, err)
		}
		s.recorder.Eventf(victim, corev1.EventTypeNormal, "Preempted", "Preempted by pod %v on node %v", preemptor.UID, node)
		return nil
	}
}

// markUnschedulable parks the pod until the cluster changes, records the
// reason as an event and, if it changed, in the PodScheduled condition.
// The backoff is deliberately not forgotten, so a pod that keeps failing
// is retried less and less often.
func (s *Scheduler) markUnschedulable(ctx context.Context, key string, pod *corev1.Pod, msg string, nominate *string) {
	s.mu.Lock()
	s.unschedulable[key] = s.cfg.Clock.Now()
	s.mu.Unlock()
	s.log.Debug("pod unschedulable", "pod", key, "reason", msg)
	s.recorder.Event(pod, corev1.EventTypeWarning, "FailedScheduling", msg)

	if cur := podScheduledCondition(pod); cur != nil && cur.Status == corev1.ConditionFalse &&
		cur.Reason == corev1.PodReasonUnschedulable && cur.Message == msg &&
		(nominate == nil || *nominate == pod.Status.NominatedNodeName) {
		return
	}
	s.submit(ctx, func(ctx context.Context) {
		if err := s.setUnschedulableCondition(ctx, pod, msg, nominate); err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			s.log.Warn("recording PodScheduled=False failed", "pod", key, "err", err)
		}
	})
}

func podScheduledCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodScheduled {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// setUnschedulableCondition writes PodScheduled=False and, when nominate
// is not nil, status.nominatedNodeName ("" clears it).
func (s *Scheduler) setUnschedulableCondition(ctx context.Context, pod *corev1.Pod, msg string, nominate *string) error {
	pod = pod.DeepCopy()
	if nominate != nil {
		pod.Status.NominatedNodeName = *nominate
	}
	now := metav1.NewTime(s.cfg.Clock.Now())
	cond := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: msg, LastTransitionTime: now}
	if cur := podScheduledCondition(pod); cur != nil {
		if cur.Status == cond.Status {
			cond.LastTransitionTime = cur.LastTransitionTime
		}
		*cur = cond
	} else {
		pod.Status.Conditions = append(pod.Status.Conditions, cond)
	}
	_, err := s.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		// A newer pod is in the informer; it will be scheduled (and, if
		// still unschedulable, marked) again.
		return nil
	}
	return err
}

// requeueUnschedulable sends every parked pod back after a change that may
// let it fit, each with its own backoff.
func (s *Scheduler) requeueUnschedulable() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key := range s.unschedulable {
		s.queue.AddRateLimited(key)
		delete(s.unschedulable, key)
	}
}

func (s *Scheduler) flushLoop(ctx context.Context) {
	interval := max(s.cfg.UnschedulableTimeout/4, 10*time.Millisecond)
	t := s.cfg.Clock.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		now := s.cfg.Clock.Now()
		s.mu.Lock()
		for key, since := range s.unschedulable {
			if now.Sub(since) >= s.cfg.UnschedulableTimeout {
				s.queue.AddRateLimited(key)
				delete(s.unschedulable, key)
			}
		}
		s.mu.Unlock()
	}
}

func asPod(obj any) (*corev1.Pod, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	return pod, ok
}

func (s *Scheduler) enqueue(pod *corev1.Pod) {
	key, err := controlloop.Key(pod)
	if err == nil {
		s.queue.Add(key)
	}
}

func (s *Scheduler) onPodAdd(obj any) {
	pod, ok := asPod(obj)
	if !ok {
		return
	}
	if pod.Spec.NodeName != "" {
		s.cache.SetPod(pod)
		return
	}
	s.cache.SetNominated(pod)
	if s.responsible(pod) {
		s.enqueue(pod)
	}
}

func (s *Scheduler) onPodUpdate(oldObj, newObj any) {
	old, ok1 := asPod(oldObj)
	pod, ok2 := asPod(newObj)
	if !ok1 || !ok2 {
		return
	}
	s.cache.SetNominated(pod)
	if pod.Spec.NodeName != "" {
		s.cache.SetPod(pod)
		if old.Spec.NodeName == "" {
			s.forgetUnschedulable(pod)
		}
		if podutil.IsTerminal(pod) && !podutil.IsTerminal(old) {
			s.requeueUnschedulable()
		}
		return
	}
	if !s.responsible(pod) {
		s.forgetUnschedulable(pod)
		return
	}
	if s.isUnschedulable(pod) && reflect.DeepEqual(old.Labels, pod.Labels) && equality.Semantic.DeepEqual(old.Spec, pod.Spec) {
		// Only the status moved (often our own PodScheduled=False): the
		// pod fits no better than before.
		return
	}
	s.forgetUnschedulable(pod)
	s.enqueue(pod)
}

func (s *Scheduler) onPodDelete(obj any) {
	pod, ok := asPod(obj)
	if !ok {
		return
	}
	s.cache.Unnominate(pod)
	if pod.Spec.NodeName != "" {
		s.cache.DeletePod(pod)
		s.requeueUnschedulable()
		return
	}
	s.cache.Forget(pod)
	s.forgetUnschedulable(pod)
}

func (s *Scheduler) isUnschedulable(pod *corev1.Pod) bool {
	key, err := controlloop.Key(pod)
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.unschedulable[key]
	return ok
}

func (s *Scheduler) forgetUnschedulable(pod *corev1.Pod) {
	key, err := controlloop.Key(pod)
	if err != nil {
		return
	}
	s.mu.Lock()
	delete(s.unschedulable, key)
	s.mu.Unlock()
}

func asNode(obj any) (*corev1.Node, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	node, ok := obj.(*corev1.Node)
	return node, ok
}

func (s *Scheduler) onNodeAdd(obj any) {
	if node, ok := asNode(obj); ok {
		s.cache.SetNode(node)
		s.requeueUnschedulable()
	}
}

func (s *Scheduler) onNodeUpdate(oldObj, newObj any) {
	old, ok1 := asNode(oldObj)
	node, ok2 := asNode(newObj)
	if !ok1 || !ok2 {
		return
	}
	s.cache.SetNode(node)
	if schedulingRelevantChange(old, node) {
		s.requeueUnschedulable()
	}
}

func (s *Scheduler) onNodeDelete(obj any) {
	if node, ok := asNode(obj); ok {
		s.cache.DeleteNode(node.Name)
	}
}

// schedulingRelevantChange ignores heartbeat-only updates, which on a big
// fleet arrive constantly and cannot make a pod fit.
func schedulingRelevantChange(old, node *corev1.Node) bool {
	return nodeReady(old) != nodeReady(node) ||
		old.Spec.Unschedulable != node.Spec.Unschedulable ||
		!reflect.DeepEqual(old.Labels, node.Labels) ||
		!equality.Semantic.DeepEqual(old.Spec.Taints, node.Spec.Taints) ||
		!equality.Semantic.DeepEqual(old.Status.Allocatable, node.Status.Allocatable)
}
