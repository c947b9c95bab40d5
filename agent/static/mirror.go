package static

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"flotilla.dev/flotilla/agent/hubclient"
	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/podutil"
)

const (
	// mirrorResync is how often mirrors are reconciled without a poke, so
	// that a mirror deleted on the hub, or a hub that came back, is
	// noticed.
	mirrorResync = 10 * time.Second
	// mirrorRetryMin is the first retry delay after a failed Sync; it
	// doubles up to mirrorResync.
	mirrorRetryMin = 500 * time.Millisecond
)

// MirrorPod is the hub's copy of a static pod: the same identity and spec,
// marked as a mirror with the static pod's config hash, and with nothing
// the hub assigns (UID, resourceVersion) or that it refuses from a device
// (ownerReferences).
func MirrorPod(static *corev1.Pod) *corev1.Pod {
	ann := make(map[string]string, len(static.Annotations)+1)
	for k, v := range static.Annotations {
		ann[k] = v
	}
	ann[api.AnnotationMirrorPod] = configHash(static)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        static.Name,
			Namespace:   static.Namespace,
			Labels:      copyMap(static.Labels),
			Annotations: ann,
		},
		Spec: *static.Spec.DeepCopy(),
	}
}

// configHash identifies a static pod's content: its UID, which is the hash
// of its manifest.
func configHash(p *corev1.Pod) string {
	if h := p.Annotations[api.AnnotationConfigHash]; h != "" {
		return h
	}
	return string(p.UID)
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Mirrorer keeps the hub's mirror pods of this node equal to its static
// pods.
type Mirrorer struct {
	client hubclient.Interface
	src    interface{ List() []*corev1.Pod }
	node   string
	log    *slog.Logger

	lastErr string // the failure last logged, so a long outage logs once
}

// NewMirrorer returns a Mirrorer of src's pods for node. log may be nil.
func NewMirrorer(client hubclient.Interface, src interface{ List() []*corev1.Pod }, node string, log *slog.Logger) *Mirrorer {
	if log == nil {
		log = slog.Default()
	}
	return &Mirrorer{client: client, src: src, node: node, log: log.With("component", "mirror-pods")}
}

// Sync makes one pass: it creates the mirror of every static pod that has
// none, and deletes mirrors whose static pod is gone or changed, or whose
// deletion someone began (the new one is created in the same pass). Pods that are not mirrors are never
// touched, even when one holds a static pod's name. It is level-triggered,
// so a failed or interrupted pass is finished by the next.
func (m *Mirrorer) Sync(ctx context.Context) error {
	list, err := m.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", m.node).String(),
	})
	if err != nil {
		return fmt.Errorf("list pods of node %s: %w", m.node, err)
	}
	onHub := map[string]*corev1.Pod{}
	for i := range list.Items {
		p := &list.Items[i]
		// The hub filters by node already; checking again costs nothing
		// and guarantees another device's mirrors are never deleted.
		if p.Spec.NodeName == m.node {
			onHub[p.Namespace+"/"+p.Name] = p
		}
	}
	want := map[string]*corev1.Pod{}
	for _, p := range m.src.List() {
		want[p.Namespace+"/"+p.Name] = p
	}

	var errs []error
	for key, hub := range onHub {
		if !podutil.IsMirror(hub) {
			continue
		}
		st, ok := want[key]
		if ok && configHash(st) == hub.Annotations[api.AnnotationMirrorPod] && hub.DeletionTimestamp == nil {
			continue
		}
		// A mirror someone began to delete has nothing on the device to
		// wait for; as in Kubernetes, finish the deletion and recreate it,
		// since the static pod still runs.
		if err := m.deleteMirror(ctx, hub); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(onHub, key)
	}
	for key, st := range want {
		if hub, exists := onHub[key]; exists {
			if !podutil.IsMirror(hub) {
				errs = append(errs, fmt.Errorf("static pod %s has no mirror: a pod of that name that is not a mirror is bound to %s; it is left alone, rename one of them", key, m.node))
			}
			continue
		}
		if err := m.createMirror(ctx, st); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// deleteMirror deletes exactly the mirror that was listed: the UID
// precondition keeps a mirror created meanwhile (by a restarted agent,
// say) from being deleted in its place. There is no grace period: nothing
// runs a mirror, so nothing has to confirm its end.
func (m *Mirrorer) deleteMirror(ctx context.Context, p *corev1.Pod) error {
	uid, zero := p.UID, int64(0)
	err := m.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		Preconditions:      &metav1.Preconditions{UID: &uid},
		GracePeriodSeconds: &zero,
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete stale mirror pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	m.log.Info("deleted stale mirror pod", "pod", p.Namespace+"/"+p.Name, "hash", p.Annotations[api.AnnotationMirrorPod])
	return nil
}

func (m *Mirrorer) createMirror(ctx context.Context, st *corev1.Pod) error {
	_, err := m.client.CoreV1().Pods(st.Namespace).Create(ctx, MirrorPod(st), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// A pod of that name exists on the hub but is not bound to this
		// node; it is someone else's to delete.
		return fmt.Errorf("create mirror pod %s/%s: a pod of that name, not bound to %s, exists on the hub; rename the static pod or delete that pod: %w",
			st.Namespace, st.Name, m.node, err)
	}
	if err != nil {
		return fmt.Errorf("create mirror pod %s/%s: %w", st.Namespace, st.Name, err)
	}
	m.log.Info("created mirror pod", "pod", st.Namespace+"/"+st.Name, "hash", configHash(st))
	return nil
}

// Run calls Sync on every poke and every 10 s until ctx ends, retrying a
// failed Sync with backoff. A hub that cannot be reached is normal for a
// device, so failures are logged (once per distinct failure) and never
// returned; Run returns nil when ctx ends.
func (m *Mirrorer) Run(ctx context.Context, poke <-chan struct{}) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	retry := mirrorRetryMin
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-poke:
			if !ok {
				poke = nil // a closed channel would spin
				continue
			}
		case <-timer.C:
		}
		next := mirrorResync
		if err := m.Sync(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			m.failed(err, retry)
			next, retry = retry, min(2*retry, mirrorResync)
		} else {
			m.recovered()
			retry = mirrorRetryMin
		}
		timer.Stop()
		select { // drain a fire that raced with the poke
		case <-timer.C:
		default:
		}
		timer.Reset(next)
	}
}

func (m *Mirrorer) failed(err error, retry time.Duration) {
	if msg := err.Error(); msg != m.lastErr {
		m.lastErr = msg
		m.log.Warn("cannot sync mirror pods with the hub; static pods keep running, retrying", "retry", retry, "err", err)
		return
	}
	m.log.Debug("mirror pod sync still failing", "retry", retry, "err", err)
}

func (m *Mirrorer) recovered() {
	if m.lastErr != "" {
		m.log.Info("mirror pods are in sync with the hub again")
		m.lastErr = ""
	}
}
