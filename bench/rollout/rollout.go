package rollout

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/test/simdevice"
)

// PodsPerDevice is how many replicas each simulated device carries.
const PodsPerDevice = 10

// ReadyDelay is how long starting a container takes on a simulated
// device (its kubelet is the agent's; its runtime is a fake): a small
// image already cached on the device.
const ReadyDelay = 100 * time.Millisecond

// Run starts ceil(replicas/10) simulated devices, rolls a Deployment of
// replicas out to them, changes its image, and returns the time from the
// change until the rollout is complete (every replica updated and
// available, Progressing=NewReplicaSetAvailable). Kubernetes' default
// strategy is used: maxSurge 25%, maxUnavailable 25%. Everything it
// created is deleted before it returns.
func Run(ctx context.Context, cfg *rest.Config, replicas int) (time.Duration, error) {
	if replicas < 1 {
		return 0, fmt.Errorf("rollout benchmark: replicas must be at least 1, got %d", replicas)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 500, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, fmt.Errorf("rollout benchmark client: %w", err)
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, err
	}
	id := "bench-rollout-" + hex.EncodeToString(b[:])

	devCtx, stopDevices := context.WithCancel(ctx)
	fleet, err := simdevice.StartFleet(devCtx, client, simdevice.Named(id, (replicas+PodsPerDevice-1)/PodsPerDevice, func(_ int, c *simdevice.Config) {
		c.ReadyDelay = ReadyDelay
		c.Labels = map[string]string{"bench": id}
	}))
	if err != nil {
		stopDevices()
		return 0, err
	}
	defer func() {
		stopDevices()
		_ = fleet.Wait()
		cleanup(context.WithoutCancel(ctx), client, id, fleet)
	}()

	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: api.NamespaceDefault},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": id}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": id}},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"bench": id},
					Containers:   []corev1.Container{{Name: "app", Image: image(1)}},
				},
			},
			ProgressDeadlineSeconds: ptr.To[int32](600),
		},
	}
	if _, err := client.AppsV1().Deployments(api.NamespaceDefault).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return 0, fmt.Errorf("create deployment %s: %w", id, err)
	}
	if err := waitComplete(ctx, client, id, int32(replicas)); err != nil {
		return 0, fmt.Errorf("initial rollout: %w", err)
	}
	start := time.Now()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.AppsV1().Deployments(api.NamespaceDefault).Get(ctx, id, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.Template.Spec.Containers[0].Image = image(2)
		_, err = client.AppsV1().Deployments(api.NamespaceDefault).Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("change the image of %s: %w", id, err)
	}
	if err := waitComplete(ctx, client, id, int32(replicas)); err != nil {
		return 0, fmt.Errorf("rolling update: %w", err)
	}
	return time.Since(start), nil
}

func image(n int) string {
	return fmt.Sprintf("registry.local/bench@sha256:%064x", n)
}

func waitComplete(ctx context.Context, c kubernetes.Interface, name string, replicas int32) error {
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := c.AppsV1().Deployments(api.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != replicas ||
			d.Status.AvailableReplicas != replicas || d.Status.Replicas != replicas {
			return false, nil
		}
		for _, cond := range d.Status.Conditions {
			if cond.Type == appsv1.DeploymentProgressing && cond.Reason == "NewReplicaSetAvailable" {
				return true, nil
			}
			if cond.Type == appsv1.DeploymentProgressing && cond.Reason == "ProgressDeadlineExceeded" {
				return false, errors.New("the rollout exceeded its progress deadline")
			}
		}
		return false, nil
	})
}

// cleanup deletes the Deployment (its ReplicaSets and pods go with it
// through the garbage collector, and directly here in case it is off) and
// the simulated devices' Nodes and Leases.
func cleanup(ctx context.Context, c kubernetes.Interface, id string, fleet *simdevice.Fleet) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	bg := metav1.DeletePropagationBackground
	_ = c.AppsV1().Deployments(api.NamespaceDefault).Delete(ctx, id, metav1.DeleteOptions{PropagationPolicy: &bg})
	sel := metav1.ListOptions{LabelSelector: "app=" + id}
	_ = c.AppsV1().ReplicaSets(api.NamespaceDefault).DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
	_ = c.CoreV1().Pods(api.NamespaceDefault).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, sel)
	for _, d := range fleet.Devices {
		if err := c.CoreV1().Nodes().Delete(ctx, d.Name(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			continue
		}
		_ = c.CoordinationV1().Leases(api.NamespaceNodeLease).Delete(ctx, d.Name(), metav1.DeleteOptions{})
	}
}
