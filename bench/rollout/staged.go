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
	// Kind is the workload rolled out: DaemonSet (a pod per device) or
	// Deployment (as many replicas as devices).
	Kind    string
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
	if r.Kind == "Deployment" {
		name = fmt.Sprintf("staged Deployment, %d replicas, 3 waves", r.Devices)
	}
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
	return staged(ctx, cfg, devices, "DaemonSet")
}

// StagedDeployment is Staged for a Deployment of as many replicas as
// devices (maxSurge and maxUnavailable 25%): its waves are judged on the
// devices that run its pods, and the scheduler places each revision's.
func StagedDeployment(ctx context.Context, cfg *rest.Config, devices int) (StagedResult, error) {
	return staged(ctx, cfg, devices, "Deployment")
}

func staged(ctx context.Context, cfg *rest.Config, devices int, kind string) (StagedResult, error) {
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
		_ = client.AppsV1().Deployments(api.NamespaceDefault).Delete(cctx, id, metav1.DeleteOptions{PropagationPolicy: &bg})
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
	wl := workloadFor(client, kind, id, int32(devices))
	if err := wl.create(ctx); err != nil {
		return StagedResult{}, err
	}
	if _, err := waitStaged(ctx, wl, policies, id, nil); err != nil {
		return StagedResult{}, fmt.Errorf("initial rollout: %w", err)
	}
	start := time.Now()
	if err := wl.setImage(ctx, image(2)); err != nil {
		return StagedResult{}, fmt.Errorf("change the image of %s: %w", id, err)
	}
	res := StagedResult{Kind: kind, Devices: devices}
	waveStart, current := start, ""
	w, err := waitStaged(ctx, wl, policies, id, func(w *v1alpha1.WorkloadRollout) {
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

// stagedWorkload is the DaemonSet or Deployment the benchmark rolls out.
type stagedWorkload struct {
	c       kubernetes.Interface
	kind    string
	id      string
	devices int32
}

func workloadFor(c kubernetes.Interface, kind, id string, devices int32) *stagedWorkload {
	return &stagedWorkload{c: c, kind: kind, id: id, devices: devices}
}

func (w *stagedWorkload) create(ctx context.Context) error {
	labels := map[string]string{"app": w.id}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
		NodeSelector: map[string]string{"bench": w.id},
		Containers:   []corev1.Container{{Name: "app", Image: image(1)}},
	}}
	meta := metav1.ObjectMeta{Name: w.id, Namespace: api.NamespaceDefault, Labels: labels}
	quarter := ptr.To(intstr.FromString("25%"))
	var err error
	if w.kind == "Deployment" {
		_, err = w.c.AppsV1().Deployments(api.NamespaceDefault).Create(ctx, &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(w.devices), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl,
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: quarter, MaxUnavailable: quarter}},
		}}, metav1.CreateOptions{})
	} else {
		_, err = w.c.AppsV1().DaemonSets(api.NamespaceDefault).Create(ctx, &appsv1.DaemonSet{ObjectMeta: meta, Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl,
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: quarter}},
		}}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("create %s %s: %w", strings.ToLower(w.kind), w.id, err)
	}
	return nil
}

func (w *stagedWorkload) setImage(ctx context.Context, img string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if w.kind == "Deployment" {
			cur, err := w.c.AppsV1().Deployments(api.NamespaceDefault).Get(ctx, w.id, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Spec.Template.Spec.Containers[0].Image = img
			_, err = w.c.AppsV1().Deployments(api.NamespaceDefault).Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}
		cur, err := w.c.AppsV1().DaemonSets(api.NamespaceDefault).Get(ctx, w.id, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.Template.Spec.Containers[0].Image = img
		_, err = w.c.AppsV1().DaemonSets(api.NamespaceDefault).Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// state is the workload's generation and whether every pod runs its
// template, available.
func (w *stagedWorkload) state(ctx context.Context) (int64, bool, error) {
	if w.kind == "Deployment" {
		d, err := w.c.AppsV1().Deployments(api.NamespaceDefault).Get(ctx, w.id, metav1.GetOptions{})
		if err != nil {
			return 0, false, err
		}
		st := d.Status
		return d.Generation, st.ObservedGeneration >= d.Generation && st.Replicas == w.devices &&
			st.UpdatedReplicas == w.devices && st.AvailableReplicas == w.devices, nil
	}
	ds, err := w.c.AppsV1().DaemonSets(api.NamespaceDefault).Get(ctx, w.id, metav1.GetOptions{})
	if err != nil {
		return 0, false, err
	}
	st := ds.Status
	return ds.Generation, st.ObservedGeneration >= ds.Generation && st.DesiredNumberScheduled == w.devices &&
		st.UpdatedNumberScheduled == w.devices && st.NumberAvailable == w.devices, nil
}

// waitStaged waits until the policy reports the workload's current
// template complete and every pod runs it, available; progress sees each
// status on the way.
func waitStaged(ctx context.Context, wl *stagedWorkload, policies dynamic.ResourceInterface, id string, progress func(*v1alpha1.WorkloadRollout)) (*v1alpha1.WorkloadRollout, error) {
	var last *v1alpha1.WorkloadRollout
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 15*time.Minute, true, func(ctx context.Context) (bool, error) {
		generation, settled, err := wl.state(ctx)
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
			if rp.Status.Workloads[i].Name == id && rp.Status.Workloads[i].Kind == wl.kind {
				w = &rp.Status.Workloads[i]
			}
		}
		if w == nil || w.ObservedGeneration < generation {
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
		return settled, nil
	})
	return last, err
}
