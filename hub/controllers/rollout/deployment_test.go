package rollout_test

import (
	"context"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/hub/controllers/rollout"
	"flotilla.dev/flotilla/hub/controllers/rollout/waves"
)

var deploymentKiosk = waves.Workload{Kind: "Deployment", Name: "kiosk"}

// createDeployment runs replicas of image v1 and waits until they are
// Ready and the policy reports the first version complete.
func (e *env) createDeployment(replicas int32) {
	e.t.Helper()
	labels := map[string]string{"app": "kiosk"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "kiosk", Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kiosk", Image: image("v1")}}}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromString("25%")), MaxUnavailable: ptr.To(intstr.FromString("25%"))}},
		},
	}
	if _, err := e.c.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.waitReplicas("every replica on v1", image("v1"), int(replicas))
	e.waitDeploymentPhase("the first version complete", image("v1"), v1alpha1.RolloutComplete)
}

// setDeploymentImage changes the template and returns its pod-template-hash.
func (e *env) setDeploymentImage(img string) string {
	e.t.Helper()
	ctx := context.Background()
	var hash string
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := e.c.AppsV1().Deployments(ns).Get(ctx, "kiosk", metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Template.Spec.Containers[0].Image = img
		d, err = e.c.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
		if err == nil {
			hash = rollout.DeploymentHash(d)
		}
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	return hash
}

// waitReplicas waits until the Deployment has exactly n pods, all Ready on
// img.
func (e *env) waitReplicas(what, img string, n int) {
	e.t.Helper()
	e.wait(what, func(ctx context.Context) (bool, error) {
		pods, err := e.c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=kiosk"})
		if err != nil {
			return false, err
		}
		got := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.Spec.Containers[0].Image != img || !ready(&p) {
				return false, nil
			}
			got++
		}
		return got == n, nil
	})
}

func (e *env) waitDeploymentPhase(what, img string, phase v1alpha1.RolloutPhase) v1alpha1.WorkloadRollout {
	e.t.Helper()
	var got v1alpha1.WorkloadRollout
	e.wait(what, func(ctx context.Context) (bool, error) {
		d, err := e.c.AppsV1().Deployments(ns).Get(ctx, "kiosk", metav1.GetOptions{})
		if err != nil || d.Spec.Template.Spec.Containers[0].Image != img {
			return false, err
		}
		rp, err := e.getPolicy(ctx)
		if err != nil {
			return false, err
		}
		w := waves.Find(rp, deploymentKiosk)
		if w == nil || w.Revision != rollout.DeploymentHash(d) || w.Phase != phase {
			return false, nil
		}
		got = *w
		return true, nil
	})
	return got
}

// bindings watches the pods of a pod-template-hash and records the first
// time each node had one bound to it.
type bindings struct {
	mu    sync.Mutex
	first map[string]time.Time
}

func (e *env) watchBindings(hash string) *bindings {
	e.t.Helper()
	w, err := e.c.CoreV1().Pods(ns).Watch(context.Background(), metav1.ListOptions{LabelSelector: appsv1.DefaultDeploymentUniqueLabelKey + "=" + hash})
	if err != nil {
		e.t.Fatal(err)
	}
	b := &bindings{first: map[string]time.Time{}}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted || p.Spec.NodeName == "" {
				continue
			}
			b.mu.Lock()
			if _, seen := b.first[p.Spec.NodeName]; !seen {
				b.first[p.Spec.NodeName] = time.Now()
			}
			b.mu.Unlock()
		}
	}()
	e.t.Cleanup(w.Stop)
	return b
}

func (b *bindings) nodes() map[string]time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]time.Time{}
	for k, v := range b.first {
		out[k] = v
	}
	return out
}

// deploymentAssignment is the wave of each device for the Deployment.
func (e *env) deploymentAssignment(ctx context.Context) map[string]int {
	e.t.Helper()
	rp, err := e.getPolicy(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	list, err := e.c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var nodes []*corev1.Node
	for i := range list.Items {
		nodes = append(nodes, &list.Items[i])
	}
	a, err := waves.Assign(rp, waves.Identity(rp, deploymentKiosk), nodes)
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

func TestDeploymentBadImageStopsAtTheCanaryWaveAndIsRolledBack(t *testing.T) {
	// The canaries are the last devices: the first ones are where a
	// scheduler that ignored the waves would put new pods first.
	e := startCanaries(t, 8, func(i int) bool { return i >= 6 })
	e.createPolicy(policy(v1alpha1.RolloutFailureRollback, 20))
	e.createDeployment(8)
	a := e.deploymentAssignment(context.Background())
	bad := e.watchBindings(e.setDeploymentImage(image("bad")))

	st := e.waitDeploymentPhase("the bad revision rolled back", image("bad"), v1alpha1.RolloutRolledBack)
	if st.CurrentWave != "canary" || st.Waves[0].Failed == 0 || len(st.Waves[0].FailedDevices) == 0 {
		t.Fatalf("rolled back at wave %q with %+v", st.CurrentWave, st.Waves)
	}
	// Every replica is back on v1, and the bad revision was only ever
	// bound to canaries.
	e.waitReplicas("every replica on v1 again", image("v1"), 8)
	if len(bad.nodes()) == 0 {
		t.Fatal("the bad revision never reached a canary: the test proves nothing")
	}
	check := func() {
		for node := range bad.nodes() {
			if a[node] != 0 {
				t.Errorf("the bad revision reached %s of wave %d", node, a[node])
			}
		}
	}
	check()
	// It stays rolled back while the Deployment's spec still says "bad".
	time.Sleep(2 * time.Second)
	if got := e.waitDeploymentPhase("still rolled back", image("bad"), v1alpha1.RolloutRolledBack); got.Revision != st.Revision {
		t.Errorf("revision %s, want %s", got.Revision, st.Revision)
	}
	e.waitReplicas("every replica still on v1", image("v1"), 8)
	check()
}

func TestDeploymentGoodImageGoesWaveByWave(t *testing.T) {
	e := start(t, 10, 2)
	e.createPolicy(policy(v1alpha1.RolloutFailureRollback, 30))
	e.createDeployment(10)
	ctx := context.Background()
	a := e.deploymentAssignment(ctx)
	v2 := e.watchBindings(e.setDeploymentImage(image("v2")))
	st := e.waitDeploymentPhase("v2 complete", image("v2"), v1alpha1.RolloutComplete)
	e.waitReplicas("every replica on v2", image("v2"), 10)

	// The first v2 pod of each wave came after the first of the wave
	// before it, and no later.
	firstOf := map[int]time.Time{}
	for node, at := range v2.nodes() {
		w := a[node]
		if cur, ok := firstOf[w]; !ok || at.Before(cur) {
			firstOf[w] = at
		}
	}
	if _, ok := firstOf[0]; !ok {
		t.Fatalf("no v2 pod on a canary: %v", v2.nodes())
	}
	for w := 1; w < 3; w++ {
		if at, ok := firstOf[w]; ok && !firstOf[w-1].Before(at) {
			t.Errorf("wave %d's first v2 pod at %s, not after wave %d's at %s", w, at.Format(time.StampMilli), w-1, firstOf[w-1].Format(time.StampMilli))
		}
	}
	var done int32
	for _, ws := range st.Waves {
		if ws.Done != ws.Devices || ws.Failed != 0 {
			t.Errorf("wave %s: %d devices, %d done, %d failed", ws.Name, ws.Devices, ws.Done, ws.Failed)
		}
		done += ws.Done
	}
	if done == 0 {
		t.Error("no wave reports a device done")
	}
}

func TestDeploymentPauseHoldsAndResumeGoesOn(t *testing.T) {
	e := start(t, 4, 1)
	e.createPolicy(policy(v1alpha1.RolloutFailurePause, 30))
	e.createDeployment(4)
	e.setPaused(true)
	v2 := e.watchBindings(e.setDeploymentImage(image("v2")))
	st := e.waitDeploymentPhase("the rollout paused", image("v2"), v1alpha1.RolloutPaused)
	if st.CurrentWave != "canary" {
		t.Errorf("paused at %q", st.CurrentWave)
	}
	time.Sleep(2 * time.Second)
	if got := v2.nodes(); len(got) != 0 {
		t.Fatalf("v2 reached %v while paused", got)
	}
	e.waitReplicas("every replica still on v1", image("v1"), 4)
	e.setPaused(false)
	e.waitDeploymentPhase("v2 complete after resume", image("v2"), v1alpha1.RolloutComplete)
	e.waitReplicas("every replica on v2", image("v2"), 4)
}
