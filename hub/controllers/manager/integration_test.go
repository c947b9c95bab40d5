package manager_test

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/controllers/deployment"
	"flotilla.dev/flotilla/hub/controllers/manager"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/internal/testbin"
	"flotilla.dev/flotilla/test/simdevice"
)

func image(tag string) string {
	return fmt.Sprintf("registry.local/shop@sha256:%064x", []byte(tag))[:len("registry.local/shop@sha256:")+64]
}

// startHub runs a hub with every loop and n simulated devices.
func startHub(t *testing.T, devices []simdevice.Config) (*hubtest.Hub, *simdevice.Fleet) {
	t.Helper()
	h := hubtest.Start(t, hubtest.Options{Loops: []hub.Loop{{
		Name: "controllers",
		Run: func(ctx context.Context, cfg *rest.Config) error {
			return manager.Run(ctx, cfg, manager.Options{})
		},
	}}})
	ctx, cancel := context.WithCancel(context.Background())
	fleet, err := simdevice.StartFleet(ctx, h.Client, devices)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := fleet.Wait(); err != nil {
			t.Errorf("devices: %v", err)
		}
	})
	return h, fleet
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func newDeployment(name string, replicas int32, img string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: img,
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}}}}},
			},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}},
			ProgressDeadlineSeconds: ptr.To[int32](600),
			RevisionHistoryLimit:    ptr.To[int32](10),
		},
	}
}

func complete(c kubernetes.Interface, name string, replicas int32) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		d, err := c.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range d.Status.Conditions {
			if cond.Type == appsv1.DeploymentProgressing && cond.Reason == deployment.ReasonNewReplicaSetAvailable &&
				d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == replicas &&
				d.Status.AvailableReplicas == replicas && d.Status.Replicas == replicas {
				return true, nil
			}
		}
		return false, nil
	}
}

func setImage(t *testing.T, c kubernetes.Interface, name, img string) {
	t.Helper()
	ctx := context.Background()
	if err := retryConflict(func() error {
		d, err := c.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Template.Spec.Containers[0].Image = img
		_, err = c.AppsV1().Deployments("default").Update(ctx, d, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func retryConflict(f func() error) error {
	for {
		err := f()
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

// TestRollingUpdateOnDevices: 3 replicas, maxSurge 1, maxUnavailable 0,
// on simulated devices; the image changes and the ReplicaSets trade
// replicas with never fewer than 3 available; a release that never gets
// Ready stalls and ends in ProgressDeadlineExceeded; rollback restores it.
func TestRollingUpdateOnDevices(t *testing.T) {
	bad := image("v3-broken")
	h, _ := startHub(t, simdevice.Named("shop", 3, func(_ int, c *simdevice.Config) {
		c.ReadyDelay = 100 * time.Millisecond
		c.NeverReady = func(p *corev1.Pod) bool { return p.Spec.Containers[0].Image == bad }
	}))
	c := h.Client
	ctx := context.Background()
	if _, err := c.AppsV1().Deployments("default").Create(ctx, newDeployment("shop", 3, image("v1")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first rollout", 60*time.Second, complete(c, "shop", 3))

	// Watch the ReplicaSets while the image changes.
	watchCtx, stopWatch := context.WithCancel(ctx)
	var mu sync.Mutex
	var violations []string
	minAvail := int32(1 << 30)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for watchCtx.Err() == nil {
			rss, err := c.AppsV1().ReplicaSets("default").List(watchCtx, metav1.ListOptions{LabelSelector: "app=shop"})
			if err != nil {
				continue
			}
			var avail, oldSpec, newAvail int32
			for _, rs := range rss.Items {
				avail += rs.Status.AvailableReplicas
				if rs.Spec.Template.Spec.Containers[0].Image == image("v2") {
					newAvail = rs.Status.AvailableReplicas
				} else {
					oldSpec += *rs.Spec.Replicas
				}
			}
			mu.Lock()
			minAvail = min(minAvail, avail)
			if 3-oldSpec > newAvail {
				violations = append(violations, fmt.Sprintf("old scaled to %d with %d new available", oldSpec, newAvail))
			}
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	setImage(t, c, "shop", image("v2"))
	waitFor(t, "the rollout to v2", 60*time.Second, complete(c, "shop", 3))
	stopWatch()
	wg.Wait()
	// The loops' informers keep no managedFields, so their updates send
	// none: the API must keep the stored entries, the user's among them.
	d, err := c.AppsV1().Deployments("default").Get(ctx, "shop", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var spec, status bool
	for _, e := range d.ManagedFields {
		spec = spec || e.Subresource == ""
		status = status || e.Subresource == "status"
	}
	if !spec || !status {
		t.Errorf("the Deployment's managedFields lost an entry after the loops updated it (spec kept %v, status kept %v): %+v", spec, status, d.ManagedFields)
	}
	if minAvail < 3 {
		t.Errorf("available replicas dropped to %d during the rollout", minAvail)
	}
	if len(violations) > 0 {
		t.Errorf("old ReplicaSet scaled down before new pods were available: %s", strings.Join(violations, "; "))
	}

	// A broken release stalls and times out.
	if err := retryConflict(func() error {
		d, err := c.AppsV1().Deployments("default").Get(ctx, "shop", metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.ProgressDeadlineSeconds = ptr.To[int32](2)
		d.Spec.Template.Spec.Containers[0].Image = bad
		_, err = c.AppsV1().Deployments("default").Update(ctx, d, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ProgressDeadlineExceeded", 60*time.Second, func(ctx context.Context) (bool, error) {
		d, err := c.AppsV1().Deployments("default").Get(ctx, "shop", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range d.Status.Conditions {
			if cond.Type == appsv1.DeploymentProgressing && cond.Status == corev1.ConditionFalse && cond.Reason == deployment.ReasonProgressDeadlineExceeded {
				if d.Status.AvailableReplicas != 3 {
					return false, fmt.Errorf("stalled rollout left %d available", d.Status.AvailableReplicas)
				}
				return true, nil
			}
		}
		return false, nil
	})
	// Rollback: the template of revision 2 again.
	setImage(t, c, "shop", image("v2"))
	waitFor(t, "the rollback", 60*time.Second, complete(c, "shop", 3))
	rss, err := c.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{LabelSelector: "app=shop"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rss.Items) != 3 {
		t.Errorf("%d ReplicaSets after the rollback, want 3 (v1, v2 reused, v3)", len(rss.Items))
	}
	for _, rs := range rss.Items {
		if rs.Spec.Template.Spec.Containers[0].Image == image("v2") && rs.Annotations[deployment.AnnotationRevision] != "4" {
			t.Errorf("rolled-back ReplicaSet revision %q, want 4", rs.Annotations[deployment.AnnotationRevision])
		}
	}
}

// TestReplaceScaleAdoptAndServe: a deleted pod is replaced, scaling works
// both ways, an orphan pod is adopted, and the Service's EndpointSlice
// follows the pods.
func TestReplaceScaleAdoptAndServe(t *testing.T) {
	h, _ := startHub(t, simdevice.Named("dev", 2, nil))
	c := h.Client
	ctx := context.Background()
	if _, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppsV1().Deployments("default").Create(ctx, newDeployment("web", 3, image("v1")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "3 available", 60*time.Second, complete(c, "web", 3))
	readyEndpoints := func(want int) func(ctx context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			l, err := c.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: api.LabelServiceName + "=web"})
			if err != nil {
				return false, err
			}
			n := 0
			for _, s := range l.Items {
				for _, ep := range s.Endpoints {
					if ep.Conditions.Ready != nil && *ep.Conditions.Ready && len(s.Ports) == 1 && *s.Ports[0].Port == 8000 {
						n++
					}
				}
			}
			return n == want, nil
		}
	}
	waitFor(t, "3 ready endpoints on port 8000", 30*time.Second, readyEndpoints(3))

	pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(pods.Items) != 3 {
		t.Fatalf("pods: %v (%d)", err, len(pods.Items))
	}
	victim := pods.Items[0].Name
	if err := c.CoreV1().Pods("default").Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a replacement pod", 60*time.Second, func(ctx context.Context) (bool, error) {
		pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, p := range pods.Items {
			if p.Name == victim {
				return false, nil
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == 3, nil
	})

	scale := func(n int32) {
		t.Helper()
		if err := retryConflict(func() error {
			d, err := c.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			d.Spec.Replicas = ptr.To(n)
			_, err = c.AppsV1().Deployments("default").Update(ctx, d, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("scale to %d", n), 60*time.Second, complete(c, "web", n))
	}
	scale(5)
	waitFor(t, "5 ready endpoints", 30*time.Second, readyEndpoints(5))
	scale(1)
	waitFor(t, "1 ready endpoint", 30*time.Second, readyEndpoints(1))

	// An orphan with the ReplicaSet's labels is adopted, so one pod goes.
	rss, err := c.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(rss.Items) != 1 {
		t.Fatalf("replicasets: %v %d", err, len(rss.Items))
	}
	orphan := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stray", Namespace: "default", Labels: rss.Items[0].Spec.Template.Labels},
		Spec:       *rss.Items[0].Spec.Template.Spec.DeepCopy(),
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "adoption and scale-down to 1", 60*time.Second, func(ctx context.Context) (bool, error) {
		pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		live := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			live++
			if ref := metav1.GetControllerOf(&p); ref == nil || ref.UID != rss.Items[0].UID {
				return false, nil
			}
		}
		return live == 1, nil
	})
}

func TestDaemonSetOnDevices(t *testing.T) {
	h, _ := startHub(t, []simdevice.Config{
		{Name: "shop-a", Labels: map[string]string{"site": "shop"}},
		{Name: "shop-b", Labels: map[string]string{"site": "shop"}, Taints: []corev1.Taint{{Key: "pos", Effect: corev1.TaintEffectNoSchedule}}},
		{Name: "office", Labels: map[string]string{"site": "office"}},
	})
	c := h.Client
	ctx := context.Background()
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"site": "shop"},
					Tolerations:  []corev1.Toleration{{Key: "pos", Operator: corev1.TolerationOpExists}},
					Containers:   []corev1.Container{{Name: "agent", Image: image("a1")}},
				},
			},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(1))}},
		},
	}
	if _, err := c.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	onNodes := func(img string, want ...string) func(ctx context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
			if err != nil {
				return false, err
			}
			got := map[string]bool{}
			for _, p := range pods.Items {
				ready := false
				for _, cond := range p.Status.Conditions {
					ready = ready || (cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue)
				}
				if p.DeletionTimestamp != nil || !ready || p.Spec.Containers[0].Image != img {
					return false, nil
				}
				got[p.Spec.NodeName] = true
			}
			if len(got) != len(want) || len(pods.Items) != len(want) {
				return false, nil
			}
			for _, n := range want {
				if !got[n] {
					return false, nil
				}
			}
			return true, nil
		}
	}
	waitFor(t, "daemon pods on the shop nodes", 60*time.Second, onNodes(image("a1"), "shop-a", "shop-b"))

	// A shop joins.
	joinCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	joined, err := simdevice.StartFleet(joinCtx, c, []simdevice.Config{{Name: "shop-c", Labels: map[string]string{"site": "shop"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = joined.Wait() }()
	waitFor(t, "the new shop's daemon pod", 60*time.Second, onNodes(image("a1"), "shop-a", "shop-b", "shop-c"))

	// Rolling update.
	if err := retryConflict(func() error {
		cur, err := c.AppsV1().DaemonSets("default").Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.Template.Spec.Containers[0].Image = image("a2")
		_, err = c.AppsV1().DaemonSets("default").Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rolling update", 90*time.Second, onNodes(image("a2"), "shop-a", "shop-b", "shop-c"))
	waitFor(t, "DaemonSet status", 30*time.Second, func(ctx context.Context) (bool, error) {
		d, err := c.AppsV1().DaemonSets("default").Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s := d.Status
		return s.DesiredNumberScheduled == 3 && s.UpdatedNumberScheduled == 3 && s.NumberAvailable == 3 && s.NumberMisscheduled == 0 && s.ObservedGeneration == d.Generation, nil
	})

	// kubectl rollout history and undo, from the DaemonSet's
	// ControllerRevisions.
	kubectl := testbin.Kubectl(t)
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(kubectl, append([]string{"--kubeconfig", h.KubeconfigPath(), "-n", "default"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	history := func() []string {
		var revs []string
		for _, l := range strings.Split(run("rollout", "history", "ds/agent"), "\n")[1:] {
			if f := strings.Fields(l); len(f) > 0 && f[0] != "REVISION" {
				revs = append(revs, f[0])
			}
		}
		return revs
	}
	waitFor(t, "two revisions in kubectl rollout history", 30*time.Second, func(context.Context) (bool, error) {
		return slices.Equal(history(), []string{"1", "2"}), nil
	})
	if out := run("rollout", "history", "ds/agent", "--revision", "1"); !strings.Contains(out, image("a1")) {
		t.Errorf("kubectl rollout history --revision 1 does not show the first image:\n%s", out)
	}
	run("rollout", "undo", "ds/agent")
	waitFor(t, "the undo's rollout", 90*time.Second, onNodes(image("a1"), "shop-a", "shop-b", "shop-c"))
	waitFor(t, "revision 1 renumbered 3", 30*time.Second, func(context.Context) (bool, error) {
		return slices.Equal(history(), []string{"2", "3"}), nil
	})
}

// requireMetadataView skips when the hub answers PartialObjectMetadata
// requests without the objects' metadata: the garbage collector sees the
// hub only through that view.
func requireMetadataView(t *testing.T, h *hubtest.Hub) {
	t.Helper()
	m, err := metadata.NewForConfig(h.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := m.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(context.Background(), "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Name != "default" {
		t.Fatalf("the hub's metadata view of namespace default has name %q: the garbage collector's metadata-only informers need it", ns.Name)
	}
}

func TestGarbageCollection(t *testing.T) {
	h, _ := startHub(t, simdevice.Named("dev", 1, nil))
	requireMetadataView(t, h)
	c := h.Client
	ctx := context.Background()
	count := func(sel string) (int, int) {
		rss, _ := c.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{LabelSelector: sel})
		pods, _ := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: sel})
		return len(rss.Items), len(pods.Items)
	}
	for _, tc := range []struct {
		name   string
		policy metav1.DeletionPropagation
	}{{"bg", metav1.DeletePropagationBackground}, {"orphan", metav1.DeletePropagationOrphan}, {"fg", metav1.DeletePropagationForeground}} {
		t.Run(string(tc.policy), func(t *testing.T) {
			if _, err := c.AppsV1().Deployments("default").Create(ctx, newDeployment(tc.name, 2, image("v1")), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the rollout", 60*time.Second, complete(c, tc.name, 2))
			sel := "app=" + tc.name
			if tc.policy == metav1.DeletePropagationForeground {
				// A finalizer of the test's keeps the ReplicaSet, so that
				// the owner's wait is a state to observe, not a race.
				holdReplicaSet(t, c, sel, true)
			}
			if err := c.AppsV1().Deployments("default").Delete(ctx, tc.name, metav1.DeleteOptions{PropagationPolicy: &tc.policy}); err != nil {
				t.Fatal(err)
			}
			switch tc.policy {
			case metav1.DeletePropagationOrphan:
				waitFor(t, "the deployment gone, its ReplicaSet orphaned", 30*time.Second, func(ctx context.Context) (bool, error) {
					_, err := c.AppsV1().Deployments("default").Get(ctx, tc.name, metav1.GetOptions{})
					if !apierrors.IsNotFound(err) {
						return false, nil
					}
					rss, err := c.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{LabelSelector: sel})
					return err == nil && len(rss.Items) == 1 && len(rss.Items[0].OwnerReferences) == 0, err
				})
				if _, pods := count(sel); pods != 2 {
					t.Errorf("%d pods after an orphaning delete, want 2", pods)
				}
			case metav1.DeletePropagationForeground:
				// The Deployment stays, deleting, with the foreground
				// finalizer, while its ReplicaSet is deleted and its pods go.
				waiting := func(ctx context.Context) (bool, error) {
					d, err := c.AppsV1().Deployments("default").Get(ctx, tc.name, metav1.GetOptions{})
					if err != nil {
						return false, fmt.Errorf("the owner went while a blocking dependent was left: %w", err)
					}
					if d.DeletionTimestamp == nil || !slices.Contains(d.Finalizers, metav1.FinalizerDeleteDependents) {
						return false, nil
					}
					rss, err := c.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{LabelSelector: sel})
					if err != nil || len(rss.Items) != 1 || rss.Items[0].DeletionTimestamp == nil {
						return false, err
					}
					_, pods := count(sel)
					return pods == 0, nil
				}
				waitFor(t, "the owner waiting, its ReplicaSet deleting and its pods gone", 60*time.Second, waiting)
				// And it keeps waiting as long as the ReplicaSet is there.
				for range 10 {
					time.Sleep(100 * time.Millisecond)
					if ok, err := waiting(ctx); !ok {
						t.Fatalf("the owner stopped waiting for its blocking dependent: %v", err)
					}
				}
				holdReplicaSet(t, c, sel, false)
				waitFor(t, "everything gone", 60*time.Second, func(ctx context.Context) (bool, error) {
					_, err := c.AppsV1().Deployments("default").Get(ctx, tc.name, metav1.GetOptions{})
					rs, pods := count(sel)
					return apierrors.IsNotFound(err) && rs == 0 && pods == 0, nil
				})
			default:
				waitFor(t, "ReplicaSet and pods gone", 60*time.Second, func(ctx context.Context) (bool, error) {
					rs, pods := count(sel)
					return rs == 0 && pods == 0, nil
				})
			}
		})
	}
}

// holdFinalizer is the test's own finalizer on a ReplicaSet.
const holdFinalizer = "test.flotilla.dev/hold"

// holdReplicaSet adds (or removes) holdFinalizer on the one ReplicaSet
// matching sel.
func holdReplicaSet(t *testing.T, c kubernetes.Interface, sel string, hold bool) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rss, err := c.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		if len(rss.Items) != 1 {
			return fmt.Errorf("%d ReplicaSets match %s, want 1", len(rss.Items), sel)
		}
		rs := &rss.Items[0]
		rs.Finalizers = slices.DeleteFunc(rs.Finalizers, func(f string) bool { return f == holdFinalizer })
		if hold {
			rs.Finalizers = append(rs.Finalizers, holdFinalizer)
		}
		_, err = c.AppsV1().ReplicaSets("default").Update(ctx, rs, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("setting the hold finalizer (%v) on the ReplicaSet: %v", hold, err)
	}
}

// TestJobsOnDevices: Jobs run to completion on (simulated) devices — one
// made by a stock `kubectl create job`, one with completions and
// parallelism — and a Job whose pods keep failing stops at its
// backoffLimit.
func TestJobsOnDevices(t *testing.T) {
	exits := func(p *corev1.Pod) (int32, bool) {
		switch p.Labels["batch.kubernetes.io/job-name"] {
		case "":
			return 0, false
		case "broken":
			return 3, true
		}
		return 0, true
	}
	h, _ := startHub(t, []simdevice.Config{{Name: "shop-a", Exits: exits}, {Name: "shop-b", Exits: exits}})
	c := h.Client
	ctx := context.Background()
	kubectl := testbin.Kubectl(t)
	if out, err := exec.Command(kubectl, "--kubeconfig", h.KubeconfigPath(), "-n", "default", "create", "job", "export", "--image", image("export")).CombinedOutput(); err != nil {
		t.Fatalf("kubectl create job: %v\n%s", err, out)
	}
	batch := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "sweep", Namespace: "default"},
		Spec: batchv1.JobSpec{Completions: ptr.To(int32(3)), Parallelism: ptr.To(int32(2)), Template: corev1.PodTemplateSpec{
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "sweep", Image: image("sweep")}}}}}}
	if _, err := c.BatchV1().Jobs("default").Create(ctx, batch, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	broken := batch.DeepCopy()
	broken.Name, broken.Spec.Completions, broken.Spec.Parallelism, broken.Spec.BackoffLimit = "broken", ptr.To(int32(1)), ptr.To(int32(1)), ptr.To(int32(0))
	if _, err := c.BatchV1().Jobs("default").Create(ctx, broken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	condition := func(name string, typ batchv1.JobConditionType) func(ctx context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			j, err := c.BatchV1().Jobs("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, cond := range j.Status.Conditions {
				if cond.Type == typ && cond.Status == corev1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		}
	}
	waitFor(t, "kubectl's job to complete", 60*time.Second, condition("export", batchv1.JobComplete))
	waitFor(t, "three completions", 60*time.Second, condition("sweep", batchv1.JobComplete))
	waitFor(t, "the broken job to fail", 60*time.Second, condition("broken", batchv1.JobFailed))
	sweep, err := c.BatchV1().Jobs("default").Get(ctx, "sweep", metav1.GetOptions{})
	if err != nil || sweep.Status.Succeeded != 3 || sweep.Status.CompletionTime == nil {
		t.Errorf("sweep status %+v (%v)", sweep.Status, err)
	}
	bj, _ := c.BatchV1().Jobs("default").Get(ctx, "broken", metav1.GetOptions{})
	if bj.Status.Failed != 1 || bj.Status.Conditions[len(bj.Status.Conditions)-1].Reason != "BackoffLimitExceeded" {
		t.Errorf("broken status %+v", bj.Status)
	}
	out, err := exec.Command(kubectl, "--kubeconfig", h.KubeconfigPath(), "-n", "default", "get", "jobs").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Complete") || !strings.Contains(string(out), "3/3") || !strings.Contains(string(out), "Failed") {
		t.Errorf("kubectl get jobs (%v):\n%s", err, out)
	}
}

// TestCronJobFiresAtTheMinute: a stock `kubectl create cronjob` with a
// `* * * * *` schedule gets its Job at the next minute boundary, named
// and annotated for that minute, which runs to completion on a device;
// `kubectl create job --from=cronjob/` starts one by hand.
func TestCronJobFiresAtTheMinute(t *testing.T) {
	exits := func(p *corev1.Pod) (int32, bool) { return 0, p.Labels["batch.kubernetes.io/job-name"] != "" }
	h, _ := startHub(t, []simdevice.Config{{Name: "shop-a", Exits: exits}})
	c := h.Client
	ctx := context.Background()
	kubectl := testbin.Kubectl(t)
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(kubectl, append([]string{"--kubeconfig", h.KubeconfigPath(), "-n", "default"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("create", "cronjob", "tick", "--image", image("tick"), "--schedule", "* * * * *")
	cj, err := c.BatchV1().CronJobs("default").Get(ctx, "tick", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The first run is the minute after the creation the hub recorded.
	created := cj.CreationTimestamp.Time
	run("create", "job", "tick-by-hand", "--from=cronjob/tick")
	hand, err := c.BatchV1().Jobs("default").Get(ctx, "tick-by-hand", metav1.GetOptions{})
	if err != nil || hand.Annotations["cronjob.kubernetes.io/instantiate"] != "manual" || metav1.GetControllerOf(hand) == nil {
		t.Fatalf("kubectl create job --from=cronjob/tick: %v, %+v", err, hand.ObjectMeta)
	}
	boundary := created.Truncate(time.Minute).Add(time.Minute)
	name := fmt.Sprintf("tick-%d", boundary.Unix()/60)
	waitFor(t, "the job of "+boundary.Format(time.TimeOnly), time.Until(boundary)+30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := c.BatchV1().Jobs("default").Get(ctx, name, metav1.GetOptions{})
		return err == nil, nil
	})
	j, _ := c.BatchV1().Jobs("default").Get(ctx, name, metav1.GetOptions{})
	if at, err := time.Parse(time.RFC3339, j.Annotations[batchv1.CronJobScheduledTimestampAnnotation]); err != nil || !at.Equal(boundary) {
		t.Errorf("scheduled timestamp %q, want %s", j.Annotations[batchv1.CronJobScheduledTimestampAnnotation], boundary)
	}
	if j.CreationTimestamp.Time.Before(boundary.Truncate(time.Second)) {
		t.Errorf("job created at %s, before its minute %s", j.CreationTimestamp, boundary)
	}
	waitFor(t, "the scheduled job to complete and the CronJob to see it", 60*time.Second, func(ctx context.Context) (bool, error) {
		cj, err := c.BatchV1().CronJobs("default").Get(ctx, "tick", metav1.GetOptions{})
		return err == nil && cj.Status.LastSuccessfulTime != nil && len(cj.Status.Active) == 0, err
	})
	if out := run("get", "cronjobs"); !strings.Contains(out, "tick") || !strings.Contains(out, "* * * * *") || !strings.Contains(out, "LAST SCHEDULE") {
		t.Errorf("kubectl get cronjobs:\n%s", out)
	}
}

// TestIndexedJobOnDevices: an Indexed Job's pods pass the hub's pod
// validation (hostname, the index variable from the annotation) and the
// Job completes with every index.
func TestIndexedJobOnDevices(t *testing.T) {
	exits := func(p *corev1.Pod) (int32, bool) { return 0, p.Labels[batchv1.JobCompletionIndexAnnotation] != "" }
	h, _ := startHub(t, []simdevice.Config{{Name: "shop-a", Exits: exits}, {Name: "shop-b", Exits: exits}})
	c := h.Client
	ctx := context.Background()
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "shards", Namespace: "default"},
		Spec: batchv1.JobSpec{Completions: ptr.To(int32(4)), Parallelism: ptr.To(int32(2)), CompletionMode: ptr.To(batchv1.IndexedCompletion),
			BackoffLimitPerIndex: ptr.To(int32(1)), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Subdomain: "shards", Containers: []corev1.Container{{Name: "shard", Image: image("shard")}}}}}}
	if _, err := c.BatchV1().Jobs("default").Create(ctx, j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every index to complete", 60*time.Second, func(ctx context.Context) (bool, error) {
		j, err := c.BatchV1().Jobs("default").Get(ctx, "shards", metav1.GetOptions{})
		return err == nil && j.Status.CompletedIndexes == "0-3" && j.Status.CompletionTime != nil, err
	})
	pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=shards"})
	if err != nil || len(pods.Items) != 4 {
		t.Fatalf("pods: %v, %v", pods, err)
	}
	for _, p := range pods.Items {
		if idx := p.Annotations[batchv1.JobCompletionIndexAnnotation]; p.Spec.Hostname != "shards-"+idx || p.Spec.Subdomain != "shards" {
			t.Errorf("pod %s: index %q, hostname %q, subdomain %q", p.Name, idx, p.Spec.Hostname, p.Spec.Subdomain)
		}
	}
}
