package rollout_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/hub/controllers/deployment"
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
				Spec: corev1.PodSpec{NodeSelector: e.nodeSelector, Containers: []corev1.Container{{Name: "kiosk", Image: image("v1")}}}},
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

// podNodes is how many pods of the Deployment each device runs.
func (e *env) podNodes() map[string]int {
	e.t.Helper()
	pods, err := e.c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=kiosk"})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			out[p.Spec.NodeName]++
		}
	}
	return out
}

func TestDeploymentOfflineDeviceFailsOnlyAfterTheTimeout(t *testing.T) {
	const timeout = 6
	e := start(t, 3, 1)
	e.createPolicy(policy(v1alpha1.RolloutFailurePause, timeout))
	e.createDeployment(3)
	if e.podNodes()["shop-0"] == 0 {
		t.Fatalf("no replica on the canary shop-0 (%v): the test proves nothing", e.podNodes())
	}
	e.fleet.Devices[0].SetRenewing(false) // the canary loses its link
	v2 := e.watchBindings(e.setDeploymentImage(image("v2")))
	st := e.waitDeploymentPhase("the canary wave progressing", image("v2"), v1alpha1.RolloutProgressing)
	started := st.Waves[0].StartTime.Time
	// Until the timeout, the wave waits for the device.
	for time.Since(started) < (timeout-2)*time.Second {
		rp, err := e.getPolicy(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		w := waves.Find(rp, deploymentKiosk)
		if w.Phase != v1alpha1.RolloutProgressing || w.Waves[0].Failed != 0 {
			t.Fatalf("%s after the wave started (timeout %ds): phase %s, wave %+v", time.Since(started).Round(time.Millisecond), timeout, w.Phase, w.Waves[0])
		}
		time.Sleep(200 * time.Millisecond)
	}
	st = e.waitDeploymentPhase("the canary wave failed", image("v2"), v1alpha1.RolloutPaused)
	fd := st.Waves[0].FailedDevices
	if len(fd) != 1 || fd[0].Node != "shop-0" || fd[0].Reason != "NotReadyInTime" {
		t.Fatalf("failed devices %+v", fd)
	}
	// No v2 replica was bound to an online device, which are all in
	// later waves.
	for node := range v2.nodes() {
		if node != "shop-0" {
			t.Errorf("v2 bound to %s of a later wave", node)
		}
	}
}

func TestDeploymentNewTemplateDuringAHeldRolloutStartsANewOne(t *testing.T) {
	e := start(t, 4, 1)
	e.createPolicy(policy(v1alpha1.RolloutFailurePause, 30))
	e.createDeployment(4)
	v1, err := e.c.AppsV1().Deployments(ns).Get(context.Background(), "kiosk", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if e.podNodes()["shop-0"] == 0 {
		t.Fatalf("no replica on the canary shop-0 (%v): the test proves nothing", e.podNodes())
	}
	e.setDeploymentImage(image("bad"))
	held := e.waitDeploymentPhase("the bad revision held at the canary", image("bad"), v1alpha1.RolloutPaused)
	if held.CurrentWave != "canary" || !meta.IsStatusConditionTrue(held.Conditions, v1alpha1.ConditionWaveFailed) {
		t.Fatalf("held at %q with %+v", held.CurrentWave, held.Conditions)
	}
	e.setDeploymentImage(image("v3"))
	st := e.waitDeploymentPhase("v3 complete", image("v3"), v1alpha1.RolloutComplete)
	if st.Revision == held.Revision {
		t.Fatal("the held rollout's revision is still the one rolled out")
	}
	if want := rollout.DeploymentHash(v1); st.PreviousRevision != want {
		t.Errorf("the new rollout started from %s, want v1's %s (the held revision never becomes the fallback)", st.PreviousRevision, want)
	}
	e.waitReplicas("every replica on v3", image("v3"), 4)
}

// Devices the Deployment's nodeSelector leaves out join while the rollout
// is under way, each Node's arrival re-syncing the policy, and the
// controllers restart. The percent wave keeps the devices it had before.
func TestDeploymentPercentWaveKeepsItsDevicesWhenUnrelatedDevicesJoin(t *testing.T) {
	e := start(t, 10, 2)
	e.nodeSelector = map[string]string{"fleet": "kiosk"}
	e.createPolicy(policy(v1alpha1.RolloutFailureRollback, 30))
	e.createDeployment(10)
	ctx := context.Background()
	a := e.deploymentAssignment(ctx)
	if c := len(nodesOf(a, 1)); c != 4 {
		t.Fatalf("%d devices in the 50%% wave, want 4 of the 8 left", c)
	}
	v2 := e.watchBindings(e.setDeploymentImage(image("v2")))
	others := e.join("other", 12)
	// The loops start over mid-rollout, from nothing but the API's state.
	e.restart()
	e.waitDeploymentPhase("v2 complete", image("v2"), v1alpha1.RolloutComplete)
	e.waitReplicas("every replica on v2", image("v2"), 10)
	first := v2.nodes()
	for _, n := range others {
		if _, ok := first[n]; ok {
			t.Errorf("v2 bound to %s, which the Deployment's nodeSelector leaves out", n)
		}
	}
	var lastHalf, firstRest time.Time
	for node, at := range first {
		switch a[node] {
		case 1:
			if at.After(lastHalf) {
				lastHalf = at
			}
		case 2:
			if firstRest.IsZero() || at.Before(firstRest) {
				firstRest = at
			}
		}
	}
	if lastHalf.IsZero() {
		t.Fatalf("no v2 replica on the percent wave's devices %v: %v", nodesOf(a, 1), first)
	}
	if !firstRest.IsZero() && !lastHalf.Before(firstRest) {
		t.Errorf("a device of the percent wave (as before the join) got v2 at %s, after the rest's first at %s: the wave changed devices",
			lastHalf.Format(time.StampMilli), firstRest.Format(time.StampMilli))
	}
}

// progressWatch records every reason the Deployment's Progressing
// condition has from now on.
type progressWatch struct {
	mu      sync.Mutex
	reasons []string
}

func (e *env) watchProgressing() *progressWatch {
	e.t.Helper()
	w, err := e.c.AppsV1().Deployments(ns).Watch(context.Background(), metav1.ListOptions{FieldSelector: "metadata.name=kiosk"})
	if err != nil {
		e.t.Fatal(err)
	}
	pw := &progressWatch{}
	go func() {
		for ev := range w.ResultChan() {
			d, ok := ev.Object.(*appsv1.Deployment)
			if !ok {
				continue
			}
			for _, c := range d.Status.Conditions {
				if c.Type == appsv1.DeploymentProgressing {
					pw.mu.Lock()
					if n := len(pw.reasons); n == 0 || pw.reasons[n-1] != c.Reason {
						pw.reasons = append(pw.reasons, c.Reason)
					}
					pw.mu.Unlock()
				}
			}
		}
	}()
	e.t.Cleanup(w.Stop)
	return pw
}

func (pw *progressWatch) seen() []string {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return append([]string(nil), pw.reasons...)
}

// A wave proving itself (readySeconds) and a pause both last longer than
// the Deployment's progressDeadlineSeconds: its Progressing condition
// waits, as a paused Deployment's does, and never runs out.
func TestDeploymentProgressDeadlineWaitsForTheWaves(t *testing.T) {
	e := start(t, 4, 1)
	rp := policy(v1alpha1.RolloutFailurePause, 60)
	rp.Spec.SuccessCriteria.ReadySeconds = ptr.To(int32(4))
	e.createPolicy(rp)
	e.createDeployment(4)
	ctx := context.Background()
	if _, err := e.c.AppsV1().Deployments(ns).Patch(ctx, "kiosk", "application/merge-patch+json", []byte(`{"spec":{"progressDeadlineSeconds":2}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	pw := e.watchProgressing()
	e.setDeploymentImage(image("v2"))
	// The canary wave's replica is replaced, then proves itself for 4s.
	e.waitDeploymentPhase("the canary wave under way", image("v2"), v1alpha1.RolloutProgressing)
	time.Sleep(3 * time.Second)
	e.setPaused(true)
	time.Sleep(4 * time.Second)
	e.setPaused(false)
	e.waitDeploymentPhase("v2 complete", image("v2"), v1alpha1.RolloutComplete)
	e.waitReplicas("every replica on v2", image("v2"), 4)
	e.wait("the Deployment complete", func(ctx context.Context) (bool, error) {
		d, err := e.c.AppsV1().Deployments(ns).Get(ctx, "kiosk", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentProgressing {
				return c.Reason == "NewReplicaSetAvailable", nil
			}
		}
		return false, nil
	})
	reasons := pw.seen()
	for _, r := range reasons {
		if r == "ProgressDeadlineExceeded" {
			t.Fatalf("the progress deadline ran out while the rollout waited for its waves: %v", reasons)
		}
	}
	if !slices.Contains(reasons, deployment.ReasonWaitingForRolloutWave) {
		t.Errorf("the Deployment never said it waited for its waves: %v", reasons)
	}
}

// A bad image rolled back at the canary; the retry sends it to the
// canary again, where it fails again: the rollout is judged anew, not let
// through.
func TestDeploymentRetryRollsTheWaveOutAgain(t *testing.T) {
	e := startCanaries(t, 4, func(i int) bool { return i == 3 })
	e.createPolicy(policy(v1alpha1.RolloutFailureRollback, 3))
	e.createDeployment(4)
	e.setDeploymentImage(image("bad"))
	rb := e.waitDeploymentPhase("the bad revision rolled back", image("bad"), v1alpha1.RolloutRolledBack)
	e.waitReplicas("every replica on v1 again", image("v1"), 4)
	bad := e.watchBindings(rb.Revision)
	// Start times are kept to the second: retrying within the second of
	// the failure would restart the wave at the same recorded time.
	time.Sleep(1100 * time.Millisecond)
	e.retry("deployment", "again")
	e.wait("the retry answered", func(ctx context.Context) (bool, error) {
		rp, err := e.getPolicy(ctx)
		if err != nil {
			return false, err
		}
		w := waves.Find(rp, deploymentKiosk)
		return w != nil && w.LastHandledRetryAt == "again", nil
	})
	again := e.waitDeploymentPhase("the bad revision rolled back again", image("bad"), v1alpha1.RolloutRolledBack)
	if len(bad.nodes()) == 0 {
		t.Fatal("the retry never sent the bad revision to the canary again")
	}
	for node := range bad.nodes() {
		if node != "shop-3" {
			t.Errorf("the retried bad revision reached %s, not a canary", node)
		}
	}
	if !again.Waves[0].StartTime.After(rb.Waves[0].StartTime.Time) {
		t.Errorf("the wave's start %s did not move on from %s", again.Waves[0].StartTime, rb.Waves[0].StartTime)
	}
	e.waitReplicas("every replica on v1 again", image("v1"), 4)
}
