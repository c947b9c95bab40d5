package rollout

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/test/simdevice"
)

// Staged waves: a canary wave of 1% of the devices (by label), then 10% of
// the others, then the rest.
const (
	StagedCanaryPercent = 1
	StagedSecondPercent = 10
	// StagedReadySeconds is each wave's readySeconds: part of every
	// wave's time by design.
	StagedReadySeconds = 1
)

// StagedResult is the time each wave of a staged rollout took, from its
// admission to the next wave's (or completion), and in all.
type StagedResult struct {
	Devices int
	Waves   []WaveTime
	Total   time.Duration
}

// WaveTime is one wave's devices and time.
type WaveTime struct {
	Name    string
	Devices int32
	Took    time.Duration
}

// Lines formats the result for make bench.
func (r StagedResult) Lines() []string {
	var parts []string
	for _, w := range r.Waves {
		parts = append(parts, fmt.Sprintf("%s (%d) %v", w.Name, w.Devices, w.Took.Round(10*time.Millisecond)))
	}
	name := fmt.Sprintf("staged rollout, %d devices, 3 waves", r.Devices)
	return []string{
		fmt.Sprintf("%-44s %v in all  (readySeconds %d per wave, maxUnavailable 25%%, containers start in %v)", name, r.Total.Round(10*time.Millisecond), StagedReadySeconds, ReadyDelay),
		fmt.Sprintf("%-44s %s", "  per wave", strings.Join(parts, ", ")),
	}
}

// Staged starts devices simulated devices, runs a DaemonSet on them under
// a three-wave RolloutPolicy, changes its image and measures each wave
// from the policy's status until the rollout is complete. Everything it
// created is deleted before it returns.
func Staged(ctx context.Context, cfg *rest.Config, devices int) (StagedResult, error) {
	if devices < 3 {
		return StagedResult{}, fmt.Errorf("staged rollout benchmark: needs at least 3 devices, got %d", devices)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 500, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return StagedResult{}, fmt.Errorf("staged rollout benchmark client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return StagedResult{}, fmt.Errorf("staged rollout benchmark client: %w", err)
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return StagedResult{}, err
	}
	id := "bench-staged-" + hex.EncodeToString(b[:])
	canaries := max(1, devices*StagedCanaryPercent/100)

	devCtx, stopDevices := context.WithCancel(ctx)
	fleet, err := simdevice.StartFleet(devCtx, client, simdevice.Named(id, devices, func(i int, c *simdevice.Config) {
		c.ReadyDelay = ReadyDelay
		c.Labels = map[string]string{"bench": id}
		if i < canaries {
			c.Labels["ring"] = "canary"
		}
	}))
	if err != nil {
		stopDevices()
		return StagedResult{}, err
	}
	policies := dyn.Resource(v1alpha1.SchemeGroupVersion.WithResource("rolloutpolicies")).Namespace(api.NamespaceDefault)
	defer func() {
		stopDevices()
		_ = fleet.Wait()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = policies.Delete(cctx, id, metav1.DeleteOptions{})
		bg := metav1.DeletePropagationBackground
		_ = client.AppsV1().DaemonSets(api.NamespaceDefault).Delete(cctx, id, metav1.DeleteOptions{PropagationPolicy: &bg})
		cleanup(context.WithoutCancel(ctx), client, id, fleet)
	}()

	rp := &v1alpha1.RolloutPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "RolloutPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: api.NamespaceDefault},
		Spec: v1alpha1.RolloutPolicySpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": id}},
			Waves: []v1alpha1.RolloutWave{
				{Name: "canary", NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}},
				{Name: "ten-percent", Percent: ptr.To(int32(StagedSecondPercent))},
				{Name: "rest"},
			},
			SuccessCriteria: v1alpha1.SuccessCriteria{ReadySeconds: ptr.To(int32(StagedReadySeconds)), TimeoutSeconds: ptr.To(int32(600)), MaxFailures: ptr.To(intstr.FromInt32(0))},
			OnFailure:       v1alpha1.RolloutFailurePause,
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(rp)
	if err != nil {
		return StagedResult{}, err
	}
	if _, err := policies.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		return StagedResult{}, fmt.Errorf("create rolloutpolicy %s: %w", id, err)
	}
	labels := map[string]string{"app": id}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: api.NamespaceDefault, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				NodeSelector: map[string]string{"bench": id},
				Containers:   []corev1.Container{{Name: "app", Image: image(1)}},
			}},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromString("25%"))}},
		},
	}
	if _, err := client.AppsV1().DaemonSets(api.NamespaceDefault).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		return StagedResult{}, fmt.Errorf("create daemonset %s: %w", id, err)
	}
	if _, err := waitStaged(ctx, client, policies, id, int32(devices), nil); err != nil {
		return StagedResult{}, fmt.Errorf("initial rollout: %w", err)
	}
	start := time.Now()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.AppsV1().DaemonSets(api.NamespaceDefault).Get(ctx, id, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.Template.Spec.Containers[0].Image = image(2)
		_, err = client.AppsV1().DaemonSets(api.NamespaceDefault).Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil {
		return StagedResult{}, fmt.Errorf("change the image of %s: %w", id, err)
	}
	res := StagedResult{Devices: devices}
	waveStart, current := start, ""
	w, err := waitStaged(ctx, client, policies, id, int32(devices), func(w *v1alpha1.WorkloadRollout) {
		if w.CurrentWave == current {
			return
		}
		now := time.Now()
		if current != "" {
			res.Waves = append(res.Waves, WaveTime{Name: current, Took: now.Sub(waveStart)})
		}
		current, waveStart = w.CurrentWave, now
	})
	if err != nil {
		return StagedResult{}, fmt.Errorf("staged rollout: %w", err)
	}
	res.Total = time.Since(start)
	if current != "" {
		res.Waves = append(res.Waves, WaveTime{Name: current, Took: time.Since(waveStart)})
	}
	for i := range res.Waves {
		for _, ws := range w.Waves {
			if ws.Name == res.Waves[i].Name {
				res.Waves[i].Devices = ws.Devices
			}
		}
	}
	return res, nil
}

// waitStaged waits until the policy reports the DaemonSet's current
// template complete and every device runs it, available; progress sees
// each status on the way.
func waitStaged(ctx context.Context, c kubernetes.Interface, policies dynamic.ResourceInterface, id string, devices int32, progress func(*v1alpha1.WorkloadRollout)) (*v1alpha1.WorkloadRollout, error) {
	var last *v1alpha1.WorkloadRollout
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 15*time.Minute, true, func(ctx context.Context) (bool, error) {
		ds, err := c.AppsV1().DaemonSets(api.NamespaceDefault).Get(ctx, id, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		u, err := policies.Get(ctx, id, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, fmt.Errorf("rolloutpolicy %s is gone", id)
		}
		if err != nil {
			return false, err
		}
		rp := &v1alpha1.RolloutPolicy{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, rp); err != nil {
			return false, err
		}
		var w *v1alpha1.WorkloadRollout
		for i := range rp.Status.Workloads {
			if rp.Status.Workloads[i].Name == id {
				w = &rp.Status.Workloads[i]
			}
		}
		if w == nil || w.ObservedGeneration < ds.Generation {
			return false, nil
		}
		last = w
		if progress != nil {
			progress(w)
		}
		switch w.Phase {
		case v1alpha1.RolloutPaused, v1alpha1.RolloutRolledBack:
			return false, fmt.Errorf("the rollout stopped at wave %s: %s", w.CurrentWave, w.Message)
		case v1alpha1.RolloutComplete:
		default:
			return false, nil
		}
		st := ds.Status
		return st.ObservedGeneration >= ds.Generation && st.DesiredNumberScheduled == devices &&
			st.UpdatedNumberScheduled == devices && st.NumberAvailable == devices, nil
	})
	return last, err
}
