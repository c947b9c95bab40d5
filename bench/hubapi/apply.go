package hubapi

import (
	"context"
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ApplyResult compares writes of one Deployment by server-side apply and
// by update.
type ApplyResult struct {
	Writes               int
	ApplyP50, ApplyP99   time.Duration
	UpdateP50, UpdateP99 time.Duration
	ManagedFieldsBytes   int
}

const benchImage = "registry.local/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// ApplyVsUpdate changes the same Deployment in ns n times by server-side
// apply (client-go's typed Apply, as a controller would), then n times by
// update, one client at a time, and measures each write. Every write
// changes an annotation, so each is stored and none starts a rollout; an
// update sends the object the previous one returned (one PUT; a GET, not
// timed, only after a controller's write made it stale).
func ApplyVsUpdate(ctx context.Context, cfg *rest.Config, ns string, n int) (ApplyResult, error) {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = -1, 0
	k, err := kubernetes.NewForConfig(c)
	if err != nil {
		return ApplyResult{}, err
	}
	deps := k.AppsV1().Deployments(ns)
	labels := map[string]string{"app": "bench-apply"}
	config := func(round int) *appsv1ac.DeploymentApplyConfiguration {
		return appsv1ac.Deployment("bench-apply", ns).WithLabels(labels).WithAnnotations(map[string]string{roundKey: strconv.Itoa(round)}).WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(0).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
			WithTemplate(corev1ac.PodTemplateSpec().WithLabels(labels).WithSpec(corev1ac.PodSpec().
				WithContainers(corev1ac.Container().WithName("app").WithImage(benchImage).
					WithPorts(corev1ac.ContainerPort().WithContainerPort(8080)).
					WithEnv(corev1ac.EnvVar().WithName("SHOP").WithValue("0042"))))))
	}
	opts := metav1.ApplyOptions{FieldManager: "bench", Force: true}
	if _, err := deps.Apply(ctx, config(0), opts); err != nil {
		return ApplyResult{}, fmt.Errorf("creating the deployment by apply: %w", err)
	}
	apply := make([]time.Duration, n)
	for i := range apply {
		t0 := time.Now()
		if _, err := deps.Apply(ctx, config(i+1), opts); err != nil {
			return ApplyResult{}, fmt.Errorf("apply %d: %w", i, err)
		}
		apply[i] = time.Since(t0)
	}
	update := make([]time.Duration, n)
	var d *appsv1.Deployment
	for i := 0; i < n; {
		if d == nil {
			// Not timed: the update's own cost is the PUT.
			if d, err = deps.Get(ctx, "bench-apply", metav1.GetOptions{}); err != nil {
				return ApplyResult{}, err
			}
		}
		d.Annotations[roundKey] = strconv.Itoa(n + i + 1)
		t0 := time.Now()
		out, err := deps.Update(ctx, d, metav1.UpdateOptions{FieldManager: "bench-update"})
		if apierrors.IsConflict(err) {
			// The controllers wrote meanwhile: read it again.
			d = nil
			continue
		}
		if err != nil {
			return ApplyResult{}, fmt.Errorf("update %d: %w", i, err)
		}
		update[i] = time.Since(t0)
		d = out
		i++
	}
	r := ApplyResult{Writes: n}
	r.ApplyP50, r.ApplyP99 = percentiles(apply)
	r.UpdateP50, r.UpdateP99 = percentiles(update)
	for _, e := range d.ManagedFields {
		if e.FieldsV1 != nil {
			r.ManagedFieldsBytes += len(e.FieldsV1.Raw)
		}
	}
	return r, deps.Delete(ctx, "bench-apply", metav1.DeleteOptions{})
}

// roundKey is the annotation each write changes.
const roundKey = "bench.flotilla.dev/round"
