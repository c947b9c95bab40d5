package rollout

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/hub/controllers/daemonset"
	"flotilla.dev/flotilla/hub/controllers/rollout/waves"
	"flotilla.dev/flotilla/internal/controlloop"
)

// Name is the loop's name in logs, queue metrics and leader election.
const Name = "rollout"

// Condition reasons and event reasons.
const (
	ReasonWaveSucceeded = "WaveSucceeded"
	ReasonWaveFailed    = "WaveFailed"
	ReasonRolledBack    = "RolledBack"
	ReasonPausedOnFail  = "PausedOnFailure"
	ReasonPaused        = "Paused"
	ReasonResumed       = "Resumed"
	ReasonStarted       = "RolloutStarted"
	ReasonComplete      = "RolloutComplete"
	ReasonRetried       = "Retried"
)

// Options tune the loop; the zero value is production.
type Options struct {
	Clock  clock.Clock
	Logger *slog.Logger
}

// Controller is the rollout loop.
type Controller struct {
	dyn        dynamic.Interface
	policies   *Policies
	dsLister   appslisters.DaemonSetLister
	dLister    appslisters.DeploymentLister
	rsLister   appslisters.ReplicaSetLister
	podLister  corelisters.PodLister
	nodeLister corelisters.NodeLister
	revLister  appslisters.ControllerRevisionLister
	recorder   record.EventRecorder
	clock      clock.Clock
	log        *slog.Logger
	loop       *controlloop.Loop
}

// New wires the loop to the policies and the factory's DaemonSet,
// Deployment, ReplicaSet, Pod and Node informers.
func New(dyn dynamic.Interface, policies *Policies, factory informers.SharedInformerFactory, recorder record.EventRecorder, opts Options) (*Controller, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	dsInf := factory.Apps().V1().DaemonSets()
	podInf := factory.Core().V1().Pods()
	nodeInf := factory.Core().V1().Nodes()
	revInf := factory.Apps().V1().ControllerRevisions()
	dInf := factory.Apps().V1().Deployments()
	rsInf := factory.Apps().V1().ReplicaSets()
	c := &Controller{
		dyn: dyn, policies: policies,
		dsLister: dsInf.Lister(), dLister: dInf.Lister(), rsLister: rsInf.Lister(), podLister: podInf.Lister(), nodeLister: nodeInf.Lister(), revLister: revInf.Lister(),
		recorder: recorder, clock: opts.Clock, log: opts.Logger.With("controller", Name),
	}
	c.loop = controlloop.New(Name, c.sync, controlloop.Options{Logger: opts.Logger})
	// A policy's change may change which policy stages a workload, and
	// so what every other policy of the namespace reports.
	onPolicy := func(obj any) {
		if k, err := controlloop.Key(obj); err == nil {
			if n, _, err := cache.SplitMetaNamespaceKey(k); err == nil {
				c.enqueueNamespace(n)
			}
		}
	}
	if err := policies.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onPolicy, UpdateFunc: func(_, cur any) { onPolicy(cur) }, DeleteFunc: onPolicy,
	}); err != nil {
		return nil, fmt.Errorf("rolloutpolicy informer: %w", err)
	}
	onDS := func(obj any) {
		if ds, ok := controlloop.Deleted[*appsv1.DaemonSet](obj); ok {
			c.enqueueNamespace(ds.Namespace)
		}
	}
	if _, err := dsInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onDS, UpdateFunc: func(_, cur any) { onDS(cur) }, DeleteFunc: onDS,
	}); err != nil {
		return nil, fmt.Errorf("daemonset informer: %w", err)
	}
	onD := func(obj any) {
		if d, ok := controlloop.Deleted[*appsv1.Deployment](obj); ok {
			c.enqueueNamespace(d.Namespace)
		}
	}
	if _, err := dInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onD, UpdateFunc: func(_, cur any) { onD(cur) }, DeleteFunc: onD,
	}); err != nil {
		return nil, fmt.Errorf("deployment informer: %w", err)
	}
	// A ReplicaSet's revision annotation gives the status its number.
	onRS := func(obj any) {
		if rs, ok := controlloop.Deleted[*appsv1.ReplicaSet](obj); ok {
			c.enqueueNamespace(rs.Namespace)
		}
	}
	if _, err := rsInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onRS, UpdateFunc: func(_, cur any) { onRS(cur) }}); err != nil {
		return nil, fmt.Errorf("replicaset informer: %w", err)
	}
	onPod := func(obj any) {
		p, ok := controlloop.Deleted[*corev1.Pod](obj)
		if !ok {
			return
		}
		if ref := metav1.GetControllerOfNoCopy(p); ref != nil && (ref.Kind == daemonset.GVK.Kind || ref.Kind == "ReplicaSet") {
			c.enqueueNamespace(p.Namespace)
		}
	}
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onPod, UpdateFunc: func(_, cur any) { onPod(cur) }, DeleteFunc: onPod,
	}); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	if _, err := nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.enqueueAll() },
		UpdateFunc: func(old, cur any) {
			if !labels.Equals(old.(*corev1.Node).Labels, cur.(*corev1.Node).Labels) {
				c.enqueueAll()
			}
		},
		DeleteFunc: func(any) { c.enqueueAll() },
	}); err != nil {
		return nil, fmt.Errorf("node informer: %w", err)
	}
	// A new revision gets its number: the status shows it.
	onRev := func(obj any) {
		if r, ok := controlloop.Deleted[*appsv1.ControllerRevision](obj); ok {
			c.enqueueNamespace(r.Namespace)
		}
	}
	if _, err := revInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onRev}); err != nil {
		return nil, fmt.Errorf("controllerrevision informer: %w", err)
	}
	c.loop.WaitFor(policies.HasSynced, dsInf.Informer().HasSynced, dInf.Informer().HasSynced, rsInf.Informer().HasSynced, podInf.Informer().HasSynced, nodeInf.Informer().HasSynced, revInf.Informer().HasSynced)
	return c, nil
}

// Run runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error { return c.loop.Run(ctx, workers) }

func (c *Controller) enqueueNamespace(ns string) {
	for _, rp := range c.policies.InNamespace(ns) {
		c.loop.EnqueueKey(controlloop.ObjectKey(rp))
	}
}

func (c *Controller) enqueueAll() {
	nss := map[string]bool{}
	for _, obj := range c.policies.inf.GetStore().List() {
		if rp, ok := obj.(*v1alpha1.RolloutPolicy); ok && !nss[rp.Namespace] {
			nss[rp.Namespace] = true
			c.enqueueNamespace(rp.Namespace)
		}
	}
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("rolloutpolicy key %q: %w", key, err)
	}
	rp, ok := c.policies.Get(ns, name)
	if !ok || rp.DeletionTimestamp != nil {
		return nil
	}
	dss, err := c.dsLister.DaemonSets(ns).List(labels.Everything())
	if err != nil {
		return err
	}
	nodes, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		return err
	}
	sort.Slice(dss, func(i, j int) bool { return dss[i].Name < dss[j].Name })
	deps, err := c.dLister.Deployments(ns).List(labels.Everything())
	if err != nil {
		return err
	}
	sort.Slice(deps, func(i, j int) bool { return deps[i].Name < deps[j].Name })
	now := c.clock.Now()
	st := rp.Status.DeepCopy()
	st.ObservedGeneration = rp.Generation
	st.Workloads = nil
	var recheck time.Duration
	stepOne := func(s *staged) error {
		w, after, err := c.step(rp, s, now)
		if err != nil {
			return err
		}
		st.Workloads = append(st.Workloads, *w)
		if after > 0 && (recheck == 0 || after < recheck) {
			recheck = after
		}
		return nil
	}
	for _, ds := range dss {
		if owner := c.policies.For(ns, ds.Labels); owner == nil || owner.Name != rp.Name || ds.DeletionTimestamp != nil {
			continue
		}
		s, err := c.daemonSetStaged(ds, nodes)
		if err != nil {
			return err
		}
		if err := stepOne(s); err != nil {
			return err
		}
	}
	for _, d := range deps {
		if owner := c.policies.For(ns, d.Labels); owner == nil || owner.Name != rp.Name || d.DeletionTimestamp != nil {
			continue
		}
		s, err := c.deploymentStaged(d, nodes)
		if err != nil {
			return err
		}
		if err := stepOne(s); err != nil {
			return err
		}
	}
	var all []workloadLabels
	for _, ds := range dss {
		if ds.DeletionTimestamp == nil {
			all = append(all, workloadLabels{waves.Workload{Kind: daemonset.GVK.Kind, Name: ds.Name}, ds.Labels})
		}
	}
	for _, d := range deps {
		if d.DeletionTimestamp == nil {
			all = append(all, workloadLabels{waves.Workload{Kind: "Deployment", Name: d.Name}, d.Labels})
		}
	}
	if msg := setOverlapping(&st.Conditions, rp.Generation, ignoredBy(rp, c.policies.InNamespace(ns), all)); msg != "" {
		c.recorder.Event(rp, corev1.EventTypeWarning, v1alpha1.ConditionOverlapping, msg)
	}
	if recheck > 0 {
		c.loop.EnqueueAfter(key, recheck)
	}
	if apiequality.Semantic.DeepEqual(&rp.Status, st) {
		return nil
	}
	return c.writeStatus(ctx, rp, st)
}

func (c *Controller) writeStatus(ctx context.Context, rp *v1alpha1.RolloutPolicy, st *v1alpha1.RolloutPolicyStatus) error {
	cp := rp.DeepCopy()
	cp.Status = *st
	cp.APIVersion, cp.Kind = v1alpha1.SchemeGroupVersion.String(), "RolloutPolicy"
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cp)
	if err != nil {
		return err
	}
	_, err = c.dyn.Resource(GVR).Namespace(rp.Namespace).UpdateStatus(ctx, &unstructured.Unstructured{Object: obj}, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// The cache will show the newer policy (or its deletion) and
		// bring it back here.
		return nil
	}
	if err != nil {
		return fmt.Errorf("update status of rolloutpolicy %s/%s: %w", rp.Namespace, rp.Name, err)
	}
	return nil
}

// step takes the rollout of ds one step from what rp's status says: a new
// template starts a rollout, a wave that met the criteria admits the next,
// a failed one pauses or rolls back. It returns the workload's new status
// and when time alone may change it.
func (c *Controller) step(rp *v1alpha1.RolloutPolicy, s *staged, now time.Time) (*v1alpha1.WorkloadRollout, time.Duration, error) {
	wl, hash, podsOf := s.id, s.hash, s.podsOf
	assign, err := waves.Assign(rp, waves.Identity(rp, wl), s.eligible)
	if err != nil {
		return nil, 0, err
	}
	if s.occupiedOnly {
		for node := range assign {
			if len(podsOf[node]) == 0 {
				delete(assign, node)
			}
		}
	}
	prev := waves.Find(rp, wl)
	var w *v1alpha1.WorkloadRollout
	switch {
	case prev == nil:
		w = c.firstSight(rp, s, now)
	case prev.Revision != hash:
		w = c.start(rp, wl, hash, waves.Stable(prev), now)
	default:
		w = prev.DeepCopy()
	}
	w.RevisionNumber = s.revisionNumber
	w.ObservedGeneration = s.generation
	c.count(rp, w, assign)
	if s.retry != w.LastHandledRetryAt {
		w.LastHandledRetryAt = s.retry
		c.retry(rp, wl, w, now)
	}

	paused := rp.Spec.Paused
	switch {
	case w.Phase == v1alpha1.RolloutProgressing && paused:
		w.Phase = v1alpha1.RolloutPaused
		w.Message = "held by spec.paused: no further device gets the new revision until it is false"
		c.recorder.Eventf(rp, corev1.EventTypeNormal, ReasonPaused, "%s %s: rollout of %s paused at wave %s", wl.Kind, wl.Name, hash, w.CurrentWave)
	case w.Phase == v1alpha1.RolloutPaused && !paused && !meta.IsStatusConditionTrue(w.Conditions, v1alpha1.ConditionWaveFailed):
		// The wave's timeout counts from the resume: the time held is
		// not the devices' fault.
		w.Phase = v1alpha1.RolloutProgressing
		w.Message = ""
		if i := waves.WaveIndex(rp, w.CurrentWave); i >= 0 && i < len(w.Waves) {
			w.Waves[i].StartTime = ptrTime(now)
		}
		c.recorder.Eventf(rp, corev1.EventTypeNormal, ReasonResumed, "%s %s: rollout of %s resumed at wave %s", wl.Kind, wl.Name, hash, w.CurrentWave)
	}
	if w.Phase != v1alpha1.RolloutProgressing && !(w.Phase == v1alpha1.RolloutPaused && paused) {
		return w, 0, nil
	}
	// Judge the current wave; while it succeeds (an empty wave at once),
	// admit the next.
	for {
		i := waves.WaveIndex(rp, w.CurrentWave)
		if i < 0 {
			w.Phase = v1alpha1.RolloutPaused
			w.Message = fmt.Sprintf("the wave %q this rollout was at is no longer in spec.waves: held until the template changes", w.CurrentWave)
			return w, 0, nil
		}
		ws := &w.Waves[i]
		if ws.StartTime == nil {
			ws.StartTime = ptrTime(now)
		}
		r := waves.Judge(devicesOf(assign, i), podsOf, s.revisionLabel, hash, ws.StartTime.Time, now, rp.Spec.SuccessCriteria)
		ws.Done, ws.Failed = int32(r.Done), int32(len(r.Failures))
		ws.FailedDevices = r.Failures[:min(len(r.Failures), v1alpha1.MaxReportedFailures)]
		if w.Phase != v1alpha1.RolloutProgressing {
			return w, r.RecheckAfter, nil
		}
		switch r.Outcome {
		case waves.Pending:
			return w, r.RecheckAfter, nil
		case waves.Failed:
			c.fail(rp, wl, w, ws, r)
			return w, 0, nil
		}
		meta.SetStatusCondition(&w.Conditions, metav1.Condition{Type: v1alpha1.ConditionWaveFailed, Status: metav1.ConditionFalse,
			Reason: ReasonWaveSucceeded, Message: fmt.Sprintf("wave %s: %d of %d devices Ready on %s", ws.Name, r.Done, r.Devices, hash), ObservedGeneration: rp.Generation})
		if i == len(rp.Spec.Waves)-1 {
			w.Phase, w.CurrentWave, w.Message = v1alpha1.RolloutComplete, "", ""
			c.recorder.Eventf(rp, corev1.EventTypeNormal, ReasonComplete, "%s %s: revision %s reached every wave", wl.Kind, wl.Name, hash)
			return w, 0, nil
		}
		w.CurrentWave = rp.Spec.Waves[i+1].Name
		c.recorder.Eventf(rp, corev1.EventTypeNormal, ReasonWaveSucceeded, "%s %s: wave %s succeeded (%d devices); wave %s starts", wl.Kind, wl.Name, ws.Name, r.Devices, w.CurrentWave)
	}
}

// fail records a failed wave and what follows from it.
func (c *Controller) fail(rp *v1alpha1.RolloutPolicy, wl waves.Workload, w *v1alpha1.WorkloadRollout, ws *v1alpha1.WaveStatus, r waves.Result) {
	var names []string
	for _, f := range r.Failures[:min(len(r.Failures), 3)] {
		names = append(names, f.Node+": "+f.Reason)
	}
	if len(r.Failures) > 3 {
		names = append(names, fmt.Sprintf("%d more", len(r.Failures)-3))
	}
	why := fmt.Sprintf("wave %s failed: %d of %d devices failed, more than maxFailures %s allows (%s)",
		ws.Name, len(r.Failures), r.Devices, rp.Spec.SuccessCriteria.MaxFailures.String(), strings.Join(names, ", "))
	reason := ReasonPausedOnFail
	if rp.Spec.OnFailure == v1alpha1.RolloutFailureRollback {
		reason = ReasonRolledBack
		w.Phase = v1alpha1.RolloutRolledBack
		w.Message = why + fmt.Sprintf("; its devices went back to revision %s, and later waves never got %s. A new template starts a new rollout; flotctl rollout retry judges the wave again", w.PreviousRevision, w.Revision)
	} else {
		w.Phase = v1alpha1.RolloutPaused
		w.Message = why + "; every device stays where it is. A new template starts a new rollout; flotctl rollout retry judges the wave again"
	}
	meta.SetStatusCondition(&w.Conditions, metav1.Condition{Type: v1alpha1.ConditionWaveFailed, Status: metav1.ConditionTrue,
		Reason: reason, Message: why, ObservedGeneration: rp.Generation})
	c.recorder.Eventf(rp, corev1.EventTypeWarning, ReasonWaveFailed, "%s %s: %s", wl.Kind, wl.Name, w.Message)
}

// retry judges a failed wave again, as asked: the wave goes back to
// Progressing with its timeout counted from now, and (rolled back) its
// devices get the new revision again. A rollout with no failed wave has
// nothing to retry.
func (c *Controller) retry(rp *v1alpha1.RolloutPolicy, wl waves.Workload, w *v1alpha1.WorkloadRollout, now time.Time) {
	if !meta.IsStatusConditionTrue(w.Conditions, v1alpha1.ConditionWaveFailed) ||
		(w.Phase != v1alpha1.RolloutPaused && w.Phase != v1alpha1.RolloutRolledBack) {
		return
	}
	i := waves.WaveIndex(rp, w.CurrentWave)
	if i < 0 || i >= len(w.Waves) {
		return
	}
	ws := &w.Waves[i]
	ws.StartTime, ws.Done, ws.Failed, ws.FailedDevices = ptrTime(now), 0, 0, nil
	w.Phase, w.Message = v1alpha1.RolloutProgressing, ""
	msg := fmt.Sprintf("wave %s retried (request %s): judged again from now", w.CurrentWave, w.LastHandledRetryAt)
	meta.SetStatusCondition(&w.Conditions, metav1.Condition{Type: v1alpha1.ConditionWaveFailed, Status: metav1.ConditionFalse,
		Reason: ReasonRetried, Message: msg, ObservedGeneration: rp.Generation})
	c.recorder.Eventf(rp, corev1.EventTypeNormal, ReasonRetried, "%s %s: %s", wl.Kind, wl.Name, msg)
}

// firstSight is the status of a workload the policy has not recorded: if
// its pods already all run the current template (or it has none yet),
// there is nothing to stage; otherwise the revision most of them run is
// the one the others keep.
func (c *Controller) firstSight(rp *v1alpha1.RolloutPolicy, s *staged, now time.Time) *v1alpha1.WorkloadRollout {
	hash := s.hash
	running := map[string]int{}
	for _, pods := range s.podsOf {
		for _, p := range pods {
			if h := p.Labels[s.revisionLabel]; h != hash && h != "" {
				running[h]++
			}
		}
	}
	prev, most := "", 0
	for h, n := range running {
		if n > most || (n == most && h < prev) {
			prev, most = h, n
		}
	}
	return c.start(rp, s.id, hash, prev, now)
}

// start begins a rollout of hash with devices falling back to prev; with
// nothing to fall back to, or a template that is the fallback itself,
// there is nothing to stage.
func (c *Controller) start(rp *v1alpha1.RolloutPolicy, wl waves.Workload, hash, prev string, now time.Time) *v1alpha1.WorkloadRollout {
	w := &v1alpha1.WorkloadRollout{Kind: wl.Kind, Name: wl.Name, Revision: hash, PreviousRevision: prev, StartTime: ptrTime(now)}
	if prev == "" || prev == hash || len(rp.Spec.Waves) == 0 {
		w.Phase = v1alpha1.RolloutComplete
		w.PreviousRevision = ""
		return w
	}
	w.Phase, w.CurrentWave = v1alpha1.RolloutProgressing, rp.Spec.Waves[0].Name
	w.Waves = make([]v1alpha1.WaveStatus, len(rp.Spec.Waves))
	for i, sw := range rp.Spec.Waves {
		w.Waves[i].Name = sw.Name
	}
	w.Waves[0].StartTime = ptrTime(now)
	c.recorder.Eventf(rp, corev1.EventTypeNormal, ReasonStarted, "%s %s: rolling out revision %s in waves, from %s", wl.Kind, wl.Name, hash, prev)
	return w
}

// count refreshes how many devices each wave has (they join and leave as
// devices come and go) and keeps w.Waves in step with spec.waves.
func (c *Controller) count(rp *v1alpha1.RolloutPolicy, w *v1alpha1.WorkloadRollout, assign map[string]int) {
	if w.Phase == v1alpha1.RolloutComplete && len(w.Waves) == 0 {
		return
	}
	byName := map[string]v1alpha1.WaveStatus{}
	for _, ws := range w.Waves {
		byName[ws.Name] = ws
	}
	sizes := map[int]int32{}
	for _, wave := range assign {
		sizes[wave]++
	}
	out := make([]v1alpha1.WaveStatus, len(rp.Spec.Waves))
	for i, sw := range rp.Spec.Waves {
		out[i] = byName[sw.Name]
		out[i].Name = sw.Name
		out[i].Devices = sizes[i]
		out[i].Done = min(out[i].Done, out[i].Devices)
		out[i].Failed = min(out[i].Failed, out[i].Devices-out[i].Done)
	}
	w.Waves = out
}

func (c *Controller) podsByNode(ds *appsv1.DaemonSet) (map[string][]*corev1.Pod, error) {
	all, err := c.podLister.Pods(ds.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := map[string][]*corev1.Pod{}
	for _, p := range all {
		if ref := metav1.GetControllerOfNoCopy(p); ref == nil || ref.UID != ds.UID {
			continue
		}
		if n := daemonset.TargetNode(p); n != "" {
			out[n] = append(out[n], p)
		}
	}
	return out, nil
}

func devicesOf(assign map[string]int, wave int) []string {
	var out []string
	for n, w := range assign {
		if w == wave {
			out = append(out, n)
		}
	}
	return out
}

// revisionNumber is the number kubectl rollout history shows for the
// revision hash of ds, once the DaemonSet loop has recorded it (0 before).
func (c *Controller) revisionNumber(ds *appsv1.DaemonSet, hash string) int64 {
	revs, err := c.revLister.ControllerRevisions(ds.Namespace).List(labels.SelectorFromSet(labels.Set{appsv1.ControllerRevisionHashLabelKey: hash}))
	if err != nil {
		return 0
	}
	for _, r := range revs {
		if metav1.IsControlledBy(r, ds) {
			return r.Revision
		}
	}
	return 0
}

func ptrTime(t time.Time) *metav1.Time {
	m := metav1.NewTime(t)
	return &m
}
