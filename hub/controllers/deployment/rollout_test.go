package deployment

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/hub/controllers/controllerutil"
)

// settle brings a fresh Deployment to a complete rollout of v1.
func settle(t *testing.T, w *world, name string) {
	t.Helper()
	for range 3 {
		w.sync(name)
		w.step()
	}
	w.sync(name)
	d := w.deployment(name)
	if got := condition(d, appsv1.DeploymentProgressing); got != "True/NewReplicaSetAvailable" {
		t.Fatalf("initial rollout: Progressing %s, want True/NewReplicaSetAvailable", got)
	}
	if d.Annotations[AnnotationRevision] != "1" {
		t.Fatalf("initial rollout: revision %q, want 1", d.Annotations[AnnotationRevision])
	}
}

// TestRollingUpdateTable steps a 3-replica Deployment with maxSurge 1 and
// maxUnavailable 0 through an image change and checks each state against
// the seeds' table: the ReplicaSets trade replicas one at a time, never
// fewer than 3 available, the old one scaled down only after a new pod is
// Ready.
func TestRollingUpdateTable(t *testing.T) {
	w := newWorld(t, newDeployment("shop", 3, intstr.FromInt32(1), intstr.FromInt32(0)))
	settle(t, w, "shop")
	w.events()

	w.setTemplate("shop", "v2")
	w.ready["v2"] = 0

	type row struct {
		event          string
		newRS, oldRS   int32 // desired replicas
		pods, podReady int32 // pods existing, ready (after the ReplicaSet loop ran)
	}
	want := []row{
		{"surge", 1, 3, 4, 3},
		{"nothing ready yet", 1, 3, 4, 3},
		{"new pod 1 Ready", 1, 2, 3, 3},
		{"", 2, 2, 4, 3},
		{"new pod 2 Ready", 2, 1, 3, 3},
		{"", 3, 1, 4, 3},
		{"new pod 3 Ready", 3, 0, 3, 3},
	}
	readyAt := map[string]int32{"new pod 1 Ready": 1, "new pod 2 Ready": 2, "new pod 3 Ready": 3}
	var table []string
	for _, r := range want {
		if n, ok := readyAt[r.event]; ok {
			w.ready["v2"] = n
			w.step()
		}
		w.sync("shop")
		w.step()
		rss := w.rsByVersion()
		nw, old := rss["v2"], rss["v1"]
		if nw == nil || old == nil {
			t.Fatalf("%s: ReplicaSets %v, want v1 and v2", r.event, sortedNames(rss))
		}
		pods := nw.Status.Replicas + old.Status.Replicas
		ready := nw.Status.ReadyReplicas + old.Status.ReadyReplicas
		table = append(table, fmt.Sprintf("%-18s new %d old %d pods %d ready %d", r.event, *nw.Spec.Replicas, *old.Spec.Replicas, pods, ready))
		if *nw.Spec.Replicas != r.newRS || *old.Spec.Replicas != r.oldRS || pods != r.pods || ready != r.podReady {
			t.Fatalf("after %q: new %d old %d pods %d ready %d, want new %d old %d pods %d ready %d\n%s",
				r.event, *nw.Spec.Replicas, *old.Spec.Replicas, pods, ready, r.newRS, r.oldRS, r.pods, r.podReady, strings.Join(table, "\n"))
		}
		// The invariant the table illustrates.
		if avail := nw.Status.AvailableReplicas + old.Status.AvailableReplicas; avail < 3 {
			t.Fatalf("after %q: %d available, fewer than 3", r.event, avail)
		}
		if 3-*old.Spec.Replicas > nw.Status.AvailableReplicas {
			t.Fatalf("after %q: old scaled down to %d with only %d new pods available", r.event, *old.Spec.Replicas, nw.Status.AvailableReplicas)
		}
	}
	t.Logf("rollout:\n%s", strings.Join(table, "\n"))

	w.sync("shop")
	d := w.deployment("shop")
	if d.Status.Replicas != 3 || d.Status.UpdatedReplicas != 3 || d.Status.AvailableReplicas != 3 ||
		d.Status.ReadyReplicas != 3 || d.Status.UnavailableReplicas != 0 || d.Status.ObservedGeneration != 2 {
		t.Errorf("final status %+v", d.Status)
	}
	if got := condition(d, appsv1.DeploymentProgressing); got != "True/NewReplicaSetAvailable" {
		t.Errorf("Progressing %s, want True/NewReplicaSetAvailable", got)
	}
	if got := condition(d, appsv1.DeploymentAvailable); got != "True/MinimumReplicasAvailable" {
		t.Errorf("Available %s, want True/MinimumReplicasAvailable", got)
	}
	if d.Annotations[AnnotationRevision] != "2" {
		t.Errorf("deployment revision %q, want 2", d.Annotations[AnnotationRevision])
	}
	nw := w.rsByVersion()["v2"]
	if nw.Name != "shop-"+controllerutil.ComputeHash(&d.Spec.Template, nil) || nw.Labels[appsv1.DefaultDeploymentUniqueLabelKey] != controllerutil.ComputeHash(&d.Spec.Template, nil) {
		t.Errorf("new ReplicaSet %s labels %v: name and pod-template-hash must be the template hash", nw.Name, nw.Labels)
	}
	if nw.Spec.Selector.MatchLabels[appsv1.DefaultDeploymentUniqueLabelKey] == "" {
		t.Errorf("new ReplicaSet selector %v lacks pod-template-hash", nw.Spec.Selector)
	}
	evs := w.events()
	wantEvents := []string{
		"Normal ScalingReplicaSet Scaled up replica set " + nw.Name + " from 0 to 1",
		"Normal ScalingReplicaSet Scaled down replica set shop-",
	}
	for _, prefix := range wantEvents {
		found := false
		for _, e := range evs {
			if strings.HasPrefix(e, prefix) {
				found = true
			}
		}
		if !found {
			t.Errorf("no event starting %q in %q", prefix, evs)
		}
	}
}

// TestProgressDeadlineAndRollback: a new pod that never becomes Ready
// stalls the rollout, which ends in ProgressDeadlineExceeded; setting the
// template back rolls back to the old ReplicaSet, which gets revision 3.
func TestProgressDeadlineAndRollback(t *testing.T) {
	w := newWorld(t, newDeployment("shop", 3, intstr.FromInt32(1), intstr.FromInt32(0)))
	settle(t, w, "shop")
	w.setTemplate("shop", "v2")
	w.ready["v2"] = 0
	w.sync("shop")
	w.step()
	w.sync("shop")
	d := w.deployment("shop")
	if got := condition(d, appsv1.DeploymentProgressing); got != "True/NewReplicaSetCreated" && got != "True/ReplicaSetUpdated" {
		t.Fatalf("Progressing %s during the rollout", got)
	}
	w.clock.Step(599 * time.Second)
	w.sync("shop")
	if got := condition(w.deployment("shop"), appsv1.DeploymentProgressing); strings.Contains(got, ReasonProgressDeadlineExceeded) {
		t.Fatalf("timed out before the deadline: %s", got)
	}
	w.clock.Step(2 * time.Second)
	w.sync("shop")
	d = w.deployment("shop")
	if got := condition(d, appsv1.DeploymentProgressing); got != "False/ProgressDeadlineExceeded" {
		t.Fatalf("Progressing %s, want False/ProgressDeadlineExceeded", got)
	}
	if old := w.rsByVersion()["v1"]; *old.Spec.Replicas != 3 || d.Status.AvailableReplicas != 3 {
		t.Fatalf("stalled rollout: old replicas %d, available %d; want 3 and 3", *old.Spec.Replicas, d.Status.AvailableReplicas)
	}

	// Rollback = the template of revision 1 again.
	w.setTemplate("shop", "v1")
	for range 3 {
		w.sync("shop")
		w.step()
	}
	w.sync("shop")
	d = w.deployment("shop")
	rss := w.rsByVersion()
	if len(rss) != 2 {
		t.Fatalf("ReplicaSets %v after rollback, want the same two (no new one)", sortedNames(rss))
	}
	old, bad := rss["v1"], rss["v2"]
	if *old.Spec.Replicas != 3 || *bad.Spec.Replicas != 0 {
		t.Fatalf("after rollback v1 %d v2 %d, want 3 and 0", *old.Spec.Replicas, *bad.Spec.Replicas)
	}
	if old.Annotations[AnnotationRevision] != "3" || old.Annotations[AnnotationRevisionHistory] != "1" {
		t.Errorf("rolled-back ReplicaSet annotations %v, want revision 3 and revision-history 1", old.Annotations)
	}
	if d.Annotations[AnnotationRevision] != "3" {
		t.Errorf("deployment revision %q, want 3", d.Annotations[AnnotationRevision])
	}
	if got := condition(d, appsv1.DeploymentProgressing); got != "True/NewReplicaSetAvailable" {
		t.Errorf("Progressing %s after rollback, want True/NewReplicaSetAvailable", got)
	}
}

func TestRecreate(t *testing.T) {
	d := newDeployment("db", 2, intstr.FromInt32(0), intstr.FromInt32(0))
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	w := newWorld(t, d)
	settle(t, w, "db")
	w.setTemplate("db", "v2")

	w.sync("db")
	rss := w.rsByVersion()
	if len(rss) != 1 || *rss["v1"].Spec.Replicas != 0 {
		t.Fatalf("first Recreate step: %v, want only v1 scaled to 0", sortedNames(rss))
	}
	// Old pods still there: no new ReplicaSet yet.
	w.sync("db")
	if len(w.rsByVersion()) != 1 {
		t.Fatal("new ReplicaSet created while old pods still run")
	}
	w.step() // old pods gone
	w.sync("db")
	rss = w.rsByVersion()
	if rss["v2"] == nil || *rss["v2"].Spec.Replicas != 2 {
		t.Fatalf("after the old pods were gone: %v, want v2 at 2", sortedNames(rss))
	}
}

func TestPausedOnlyScales(t *testing.T) {
	w := newWorld(t, newDeployment("shop", 3, intstr.FromInt32(1), intstr.FromInt32(0)))
	settle(t, w, "shop")
	d := w.deployment("shop")
	d.Spec.Paused = true
	d.Spec.Template.Labels["version"] = "v2"
	d.Spec.Replicas = ptr.To[int32](5)
	d.Generation++
	if _, err := w.client.AppsV1().Deployments("default").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.sync("shop")
	w.step()
	w.sync("shop")
	rss := w.rsByVersion()
	if len(rss) != 1 || *rss["v1"].Spec.Replicas != 5 {
		t.Fatalf("paused: %v, v1 replicas %d; want only v1 scaled to 5", sortedNames(rss), *rss["v1"].Spec.Replicas)
	}
	if got := condition(w.deployment("shop"), appsv1.DeploymentProgressing); got != "Unknown/DeploymentPaused" {
		t.Errorf("Progressing %s, want Unknown/DeploymentPaused", got)
	}
	// Resume: the rollout starts.
	d = w.deployment("shop")
	d.Spec.Paused = false
	if _, err := w.client.AppsV1().Deployments("default").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.sync("shop")
	if w.rsByVersion()["v2"] == nil {
		t.Fatal("no new ReplicaSet after resume")
	}
}

// TestProportionalScaling is Kubernetes' documented example: 10 replicas,
// maxSurge 3, mid-rollout with 8 old and 5 new, scaled to 15: the 5 extra
// replicas go 3 to the old and 2 to the new ReplicaSet.
func TestProportionalScaling(t *testing.T) {
	w := newWorld(t, newDeployment("shop", 10, intstr.FromInt32(3), intstr.FromInt32(2)))
	settle(t, w, "shop")
	w.setTemplate("shop", "v2")
	w.ready["v2"] = 0
	w.sync("shop")
	w.step()
	w.sync("shop")
	w.step()
	rss := w.rsByVersion()
	if *rss["v1"].Spec.Replicas != 8 || *rss["v2"].Spec.Replicas != 5 {
		t.Fatalf("mid-rollout v1 %d v2 %d, want 8 and 5", *rss["v1"].Spec.Replicas, *rss["v2"].Spec.Replicas)
	}
	d := w.deployment("shop")
	d.Spec.Replicas = ptr.To[int32](15)
	d.Generation++
	if _, err := w.client.AppsV1().Deployments("default").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.sync("shop")
	rss = w.rsByVersion()
	if *rss["v1"].Spec.Replicas != 11 || *rss["v2"].Spec.Replicas != 7 {
		t.Fatalf("after scaling to 15: v1 %d v2 %d, want 11 and 7", *rss["v1"].Spec.Replicas, *rss["v2"].Spec.Replicas)
	}
}

func TestRevisionHistoryLimit(t *testing.T) {
	d := newDeployment("shop", 1, intstr.FromInt32(1), intstr.FromInt32(0))
	d.Spec.RevisionHistoryLimit = ptr.To[int32](1)
	w := newWorld(t, d)
	settle(t, w, "shop")
	for _, v := range []string{"v2", "v3", "v4"} {
		w.setTemplate("shop", v)
		for range 4 {
			w.sync("shop")
			w.step()
		}
	}
	w.sync("shop")
	rss := w.rsByVersion()
	if len(rss) != 2 || rss["v4"] == nil || rss["v3"] == nil {
		t.Fatalf("ReplicaSets %v, want v3 (history of 1) and v4", sortedNames(rss))
	}
}

func TestAdoptsMatchingReplicaSet(t *testing.T) {
	d := newDeployment("shop", 2, intstr.FromInt32(1), intstr.FromInt32(0))
	tmpl := d.Spec.Template.DeepCopy()
	hash := controllerutil.ComputeHash(tmpl, nil)
	tmpl.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = hash
	orphan := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-" + hash, Namespace: "default", UID: "orphan", Labels: tmpl.Labels},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](2), Template: *tmpl,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "shop", appsv1.DefaultDeploymentUniqueLabelKey: hash}}},
	}
	w := newWorld(t, d, orphan)
	w.sync("shop")
	rs, err := w.client.AppsV1().ReplicaSets("default").Get(ctx, orphan.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(rs); ref == nil || ref.UID != d.UID {
		t.Fatalf("orphan ReplicaSet not adopted: %+v", rs.OwnerReferences)
	}
	if n := len(w.rsByVersion()); n != 1 {
		t.Fatalf("%d ReplicaSets, want the adopted one only", n)
	}
}

func TestSelectingAllIsRefused(t *testing.T) {
	d := newDeployment("shop", 2, intstr.FromInt32(1), intstr.FromInt32(0))
	d.Spec.Selector = &metav1.LabelSelector{}
	w := newWorld(t, d)
	w.sync("shop")
	if n := len(w.rsByVersion()); n != 0 {
		t.Fatalf("%d ReplicaSets created for a select-all Deployment", n)
	}
	if ev := w.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], corev1.EventTypeWarning+" SelectingAll") {
		t.Fatalf("events %q, want Warning SelectingAll", ev)
	}
}
