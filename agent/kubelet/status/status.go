package status

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/api"
)

// PodGetter returns the pod's current object as the agent's informer has
// it (possibly a little behind the hub).
type PodGetter func(uid types.UID) (*corev1.Pod, bool)

// OwnedConditions are the condition types the kubelet computes; other
// types on the hub object are left alone.
var OwnedConditions = map[corev1.PodConditionType]bool{
	corev1.PodScheduled:                      true,
	corev1.PodInitialized:                    true,
	corev1.ContainersReady:                   true,
	corev1.PodReady:                          true,
	corev1.PodReadyToStartContainers:         true,
	corev1.PodConditionType("PodHasNetwork"): true,
	api.ConditionImagesPrepulled:             true,
}

// Options tune the Manager.
type Options struct {
	// Workers write statuses in parallel; 2 when zero.
	Workers int
	// RetryBase and RetryMax bound the backoff of failed writes
	// (100 ms and 30 s when zero).
	RetryBase, RetryMax time.Duration
	Log                 *slog.Logger
}

type entry struct {
	namespace, name string
	want            corev1.PodStatus
	written         *corev1.PodStatus
	writtenRV       int64
}

// Manager writes pod statuses.
type Manager struct {
	client hubclient.Interface
	get    PodGetter
	opts   Options
	queue  workqueue.TypedRateLimitingInterface[types.UID]

	mu   sync.Mutex
	pods map[types.UID]*entry

	writes atomic.Int64
}

// New returns a Manager; Run starts it.
func New(client hubclient.Interface, get PodGetter, opts Options) *Manager {
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.RetryBase <= 0 {
		opts.RetryBase = 100 * time.Millisecond
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = 30 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Manager{
		client: client, get: get, opts: opts, pods: map[types.UID]*entry{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](opts.RetryBase, opts.RetryMax),
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "pod-status"}),
	}
}

// Set records the status the kubelet wants for pod and queues a write if
// it differs from the last one set.
func (m *Manager) Set(pod *corev1.Pod, st corev1.PodStatus) {
	m.mu.Lock()
	e, ok := m.pods[pod.UID]
	if !ok {
		e = &entry{}
		m.pods[pod.UID] = e
	}
	e.namespace, e.name = pod.Namespace, pod.Name
	same := ok && apiequality.Semantic.DeepEqual(e.want, st)
	e.want = *st.DeepCopy()
	m.mu.Unlock()
	if !same || m.diverged(pod.UID, st) {
		m.queue.Add(pod.UID)
	}
}

// diverged reports whether the hub's copy of the pod says otherwise than
// st: someone else wrote its status (the hub marks the pods of a device
// it lost touch with not ready), and the device's word must win again.
func (m *Manager) diverged(uid types.UID, st corev1.PodStatus) bool {
	pod, ok := m.get(uid)
	return ok && !apiequality.Semantic.DeepEqual(pod.Status, Merge(pod.Status, st))
}

// QueueAll queues a write of every status set, for when the hub's pods
// have become readable again: statuses set while the hub was away had no
// pod to be written to.
func (m *Manager) QueueAll() {
	m.mu.Lock()
	uids := make([]types.UID, 0, len(m.pods))
	for uid := range m.pods {
		uids = append(uids, uid)
	}
	m.mu.Unlock()
	for _, uid := range uids {
		m.queue.Add(uid)
	}
}

// Get returns the last status set for the pod.
func (m *Manager) Get(uid types.UID) (corev1.PodStatus, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.pods[uid]
	if !ok {
		return corev1.PodStatus{}, false
	}
	return *e.want.DeepCopy(), true
}

// Forget drops a pod (it is gone).
func (m *Manager) Forget(uid types.UID) {
	m.mu.Lock()
	delete(m.pods, uid)
	m.mu.Unlock()
	m.queue.Forget(uid)
}

// Writes counts successful UpdateStatus calls (for metrics and tests).
func (m *Manager) Writes() int64 { return m.writes.Load() }

// Run writes statuses until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for i := 0; i < m.opts.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m.next(ctx) {
			}
		}()
	}
	<-ctx.Done()
	m.queue.ShutDown()
	wg.Wait()
	return nil
}

func (m *Manager) next(ctx context.Context) bool {
	uid, quit := m.queue.Get()
	if quit {
		return false
	}
	defer m.queue.Done(uid)
	if err := m.sync(ctx, uid); err != nil {
		if ctx.Err() == nil {
			m.opts.Log.Warn("pod status write failed; will retry", "pod-uid", uid, "err", err)
			m.queue.AddRateLimited(uid)
		}
		return true
	}
	m.queue.Forget(uid)
	return true
}

func rv(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func (m *Manager) sync(ctx context.Context, uid types.UID) error {
	m.mu.Lock()
	e, ok := m.pods[uid]
	if !ok {
		m.mu.Unlock()
		return nil
	}
	want := *e.want.DeepCopy()
	ns, name := e.namespace, e.name
	var written *corev1.PodStatus
	if e.written != nil {
		written = e.written.DeepCopy()
	}
	writtenRV := e.writtenRV
	m.mu.Unlock()

	// The getter answers by UID: the pod itself, or the mirror pod that
	// stands for a static pod on the hub (another UID).
	pod, ok := m.get(uid)
	if !ok {
		// Not (or no longer) on the hub: nothing to write to.
		return nil
	}
	merged := Merge(pod.Status, want)
	// The informer may not have caught up with our last write yet.
	if written != nil && rv(pod.ResourceVersion) < writtenRV && apiequality.Semantic.DeepEqual(*written, merged) {
		return nil
	}
	if apiequality.Semantic.DeepEqual(pod.Status, merged) {
		m.recordWritten(uid, merged, rv(pod.ResourceVersion))
		return nil
	}
	for attempt := 0; ; attempt++ {
		upd := pod.DeepCopy()
		upd.Status = merged
		out, err := m.client.CoreV1().Pods(ns).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		if err == nil {
			m.writes.Add(1)
			m.recordWritten(uid, out.Status, rv(out.ResourceVersion))
			return nil
		}
		if apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) || attempt > 0 {
			return err
		}
		// Our copy was stale: read the current object and merge again.
		fresh, gerr := m.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if gerr != nil {
			if apierrors.IsNotFound(gerr) {
				return nil
			}
			return gerr
		}
		if fresh.UID != uid {
			return nil
		}
		pod = fresh
		merged = Merge(pod.Status, want)
		if apiequality.Semantic.DeepEqual(pod.Status, merged) {
			m.recordWritten(uid, merged, rv(pod.ResourceVersion))
			return nil
		}
	}
}

func (m *Manager) recordWritten(uid types.UID, st corev1.PodStatus, rv int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.pods[uid]; ok {
		e.written = st.DeepCopy()
		e.writtenRV = rv
	}
}

// Merge is the status to write over current: want, plus the conditions
// of types the kubelet does not own from current, and current's terminal
// phase if it has one.
func Merge(current, want corev1.PodStatus) corev1.PodStatus {
	out := *want.DeepCopy()
	for _, c := range current.Conditions {
		if !OwnedConditions[c.Type] && !hasCondition(out.Conditions, c.Type) {
			out.Conditions = append(out.Conditions, c)
		}
	}
	if terminal(current.Phase) && !terminal(out.Phase) {
		out.Phase = current.Phase
	}
	return out
}

func terminal(p corev1.PodPhase) bool { return p == corev1.PodSucceeded || p == corev1.PodFailed }

func hasCondition(cs []corev1.PodCondition, t corev1.PodConditionType) bool {
	for _, c := range cs {
		if c.Type == t {
			return true
		}
	}
	return false
}
