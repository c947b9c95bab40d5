package kubelet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/registry"
	"flotilla.dev/flotilla/registry/trust"
)

// prepulls pulls the images a pod's DaemonSet announced for its next
// revision (api.AnnotationPrepullImages) while the pod keeps running, so
// that the controller stops the old pod only once its successor can start
// at once — and never when the new image cannot be pulled or verified.
type prepulls struct {
	mu    sync.Mutex
	state map[types.UID]*prepull
}

// prepull is one pod's announced images and how pulling them went.
type prepull struct {
	want    string // the annotation's value
	running bool
	cond    corev1.PodCondition // Type, Status, Reason, Message
	retryAt time.Time
}

// prepullCondition starts or continues pulling what pod announces and
// returns the condition to report, or nil without an announcement.
func (k *Kubelet) prepullCondition(ctx context.Context, pod *corev1.Pod) *corev1.PodCondition {
	want := pod.Annotations[api.AnnotationPrepullImages]
	k.prepulls.mu.Lock()
	defer k.prepulls.mu.Unlock()
	if want == "" {
		delete(k.prepulls.state, pod.UID)
		return nil
	}
	st := k.prepulls.state[pod.UID]
	if st == nil || st.want != want {
		st = &prepull{want: want}
		k.prepulls.state[pod.UID] = st
	}
	if !st.running && st.cond.Status != corev1.ConditionTrue && !time.Now().Before(st.retryAt) {
		st.running = true
		if st.cond.Type == "" {
			st.cond = corev1.PodCondition{Type: api.ConditionImagesPrepulled, Status: corev1.ConditionFalse, Reason: "Pulling",
				Message: fmt.Sprintf("pulling %s for the next revision", want)}
		}
		go k.runPrepull(ctx, pod.DeepCopy(), st)
	}
	c := st.cond
	return &c
}

// runPrepull makes every announced image present and verified, then
// records the outcome and wakes the pod's worker to report it.
func (k *Kubelet) runPrepull(ctx context.Context, pod *corev1.Pod, st *prepull) {
	cond := corev1.PodCondition{Type: api.ConditionImagesPrepulled, Status: corev1.ConditionTrue, Reason: "Pulled", Message: st.want}
	key := string(pod.UID) + "/prepull/" + st.want
	keys := registry.WithKeychainFunc(func() registry.Keychain { return k.pullKeychain(ctx, pod, "") })
	for _, image := range strings.Split(st.want, ",") {
		if err := k.prepullImage(ctx, image, keys); err != nil {
			reason := "ErrImagePull"
			if errors.Is(err, trust.ErrImageSignature) || errors.Is(err, registry.ErrUntrusted) {
				reason = trust.WaitingReason
			}
			cond = corev1.PodCondition{Type: api.ConditionImagesPrepulled, Status: corev1.ConditionFalse, Reason: reason,
				Message: fmt.Sprintf("image %q for the next revision: %v", image, err)}
			k.event(pod, "", corev1.EventTypeWarning, "FailedPrepull", "Failed to pull image %q for the next revision: %v", image, err)
			break
		}
	}
	if ctx.Err() != nil {
		return
	}
	now := time.Now()
	k.prepulls.mu.Lock()
	st.running, st.cond = false, cond
	if cond.Status == corev1.ConditionTrue {
		k.imageBackoff.clear(key)
	} else {
		k.imageBackoff.next(key, now)
		st.retryAt = now.Add(k.imageBackoff.delay(key))
	}
	k.prepulls.mu.Unlock()
	if cond.Status == corev1.ConditionTrue {
		k.event(pod, "", corev1.EventTypeNormal, "Prepulled", "Images for the next revision are present: %s", st.want)
	}
	k.workers.Poke(pod.UID)
}

// prepullImage makes one image present and verified, as ensureImage
// would for a container (a pinned image is never pulled again).
func (k *Kubelet) prepullImage(ctx context.Context, image string, keys registry.PullOption) error {
	ref, err := registry.ParseReference(image)
	if err != nil {
		return err
	}
	present, ok, err := k.cfg.Puller.Present(ctx, ref)
	if err != nil {
		return err
	}
	if ok {
		return k.cfg.Puller.Reverify(ctx, present, keys)
	}
	pulled, err := k.cfg.Puller.Pull(ctx, image, keys)
	if err != nil {
		return err
	}
	k.recordImageID(pulled)
	return nil
}

// forgetPrepull drops a pod's prepull state when its worker ends.
func (k *Kubelet) forgetPrepull(uid types.UID) {
	k.prepulls.mu.Lock()
	delete(k.prepulls.state, uid)
	k.prepulls.mu.Unlock()
}
