package rollout_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/controllers/daemonset"
	"flotilla.dev/flotilla/hub/controllers/manager"
	"flotilla.dev/flotilla/hub/controllers/rollout"
	"flotilla.dev/flotilla/hub/controllers/rollout/waves"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/test/simdevice"
)

const ns = "default"

func image(tag string) string {
	return fmt.Sprintf("registry.local/kiosk@sha256:%064x", []byte(tag))[:len("registry.local/kiosk@sha256:")+64]
}

// env is a hub with every loop, simulated devices and clients.
type env struct {
	t     *testing.T
	c     kubernetes.Interface
	dyn   dynamic.Interface
	fleet *simdevice.Fleet
	// nodeSelector is the workloads' template's (none by default); every
	// device start runs is labelled fleet=kiosk.
	nodeSelector map[string]string
	// restarts asks the hub to stop its controllers and start them anew.
	restarts chan chan struct{}
}

// start runs a hub and n devices; the first canaries are labelled
// ring=canary, and pods of the image "bad" never get Ready on any device.
func start(t *testing.T, n, canaries int) *env {
	t.Helper()
	return startCanaries(t, n, func(i int) bool { return i < canaries })
}

// startCanaries is start with the canaries those isCanary picks.
func startCanaries(t *testing.T, n int, isCanary func(i int) bool) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a hub with simulated devices")
	}
	restarts := make(chan chan struct{})
	h := hubtest.Start(t, hubtest.Options{Loops: []hub.Loop{{Name: "controllers",
		Run: func(ctx context.Context, cfg *rest.Config) error { return runRestartable(ctx, cfg, restarts) }}}})
	devs := simdevice.Named("shop", n, func(i int, c *simdevice.Config) {
		c.ReadyDelay = 50 * time.Millisecond
		c.Labels = map[string]string{"fleet": "kiosk"}
		if isCanary(i) {
			c.Labels["ring"] = "canary"
		}
		c.NeverReady = func(p *corev1.Pod) bool { return p.Spec.Containers[0].Image == image("bad") }
	})
	ctx, cancel := context.WithCancel(context.Background())
	fleet, err := simdevice.StartFleet(ctx, h.Client, devs)
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
	dyn, err := dynamic.NewForConfig(h.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, c: h.Client, dyn: dyn, fleet: fleet, restarts: restarts}
}

// runRestartable runs the controller manager until ctx ends, stopping it
// and starting a new one (with empty caches and queues) on each request;
// the request's channel is closed once the new one runs.
func runRestartable(ctx context.Context, cfg *rest.Config, restarts chan chan struct{}) error {
	var started chan struct{}
	for {
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- manager.Run(lctx, cfg, manager.Options{}) }()
		if started != nil {
			close(started)
		}
		select {
		case <-ctx.Done():
			cancel()
			<-done
			return nil
		case started = <-restarts:
			cancel()
			<-done
		case err := <-done:
			cancel()
			return err
		}
	}
}

// restart stops the hub's controllers and starts them anew.
func (e *env) restart() {
	e.t.Helper()
	started := make(chan struct{})
	select {
	case e.restarts <- started:
	case <-time.After(30 * time.Second):
		e.t.Fatal("the controllers did not take the restart request")
	}
	<-started
}

// join starts n more devices named prefix-N with no labels, until the
// test ends, and waits until they are Ready.
func (e *env) join(prefix string, n int) []string {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	fleet, err := simdevice.StartFleet(ctx, e.c, simdevice.Named(prefix, n, func(i int, c *simdevice.Config) {
		c.ReadyDelay = 50 * time.Millisecond
	}))
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		cancel()
		if err := fleet.Wait(); err != nil {
			e.t.Errorf("devices: %v", err)
		}
	})
	var out []string
	for _, d := range fleet.Devices {
		out = append(out, d.Name())
	}
	return out
}

func policy(onFailure v1alpha1.RolloutFailureAction, timeout int32) *v1alpha1.RolloutPolicy {
	return &v1alpha1.RolloutPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "RolloutPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: "kiosks", Namespace: ns},
		Spec: v1alpha1.RolloutPolicySpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "kiosk"}},
			Waves: []v1alpha1.RolloutWave{
				{Name: "canary", NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}}},
				{Name: "half", Percent: ptr.To(int32(50))},
				{Name: "rest"},
			},
			SuccessCriteria: v1alpha1.SuccessCriteria{ReadySeconds: ptr.To(int32(1)), TimeoutSeconds: ptr.To(timeout), MaxFailures: ptr.To(intstr.FromInt32(0))},
			OnFailure:       onFailure,
		},
	}
}

func (e *env) createPolicy(rp *v1alpha1.RolloutPolicy) {
	e.t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(rp)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.dyn.Resource(rollout.GVR).Namespace(ns).Create(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) getPolicy(ctx context.Context) (*v1alpha1.RolloutPolicy, error) {
	u, err := e.dyn.Resource(rollout.GVR).Namespace(ns).Get(ctx, "kiosks", metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	rp := &v1alpha1.RolloutPolicy{}
	return rp, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, rp)
}

func (e *env) setPaused(paused bool) {
	e.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"paused":%t}}`, paused)
	u, err := e.dyn.Resource(rollout.GVR).Namespace(ns).Patch(context.Background(), "kiosks", "application/merge-patch+json", []byte(patch), metav1.PatchOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	// The rollout loop has seen the change once it reports the policy's
	// generation as observed.
	e.wait("the pause observed", func(ctx context.Context) (bool, error) {
		rp, err := e.getPolicy(ctx)
		return err == nil && rp.Status.ObservedGeneration >= u.GetGeneration(), err
	})
}

// createDaemonSet runs image v1 everywhere and waits until the policy
// reports it complete.
func (e *env) createDaemonSet() {
	e.t.Helper()
	labels := map[string]string{"app": "kiosk"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kiosk", Namespace: ns, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{NodeSelector: e.nodeSelector, Containers: []corev1.Container{{Name: "kiosk", Image: image("v1")}}}},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromString("50%"))}},
		},
	}
	if _, err := e.c.AppsV1().DaemonSets(ns).Create(context.Background(), ds, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.waitPods("every device on v1", image("v1"), e.nodes())
	e.waitPhase("the first version complete", image("v1"), v1alpha1.RolloutComplete)
}

// setImage changes the template and returns its revision hash.
func (e *env) setImage(img string) string {
	e.t.Helper()
	ctx := context.Background()
	var hash string
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := e.c.AppsV1().DaemonSets(ns).Get(ctx, "kiosk", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ds.Spec.Template.Spec.Containers[0].Image = img
		ds, err = e.c.AppsV1().DaemonSets(ns).Update(ctx, ds, metav1.UpdateOptions{})
		if err == nil {
			hash = daemonset.Hash(ds)
		}
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	return hash
}

func (e *env) nodes() []string {
	var out []string
	for _, d := range e.fleet.Devices {
		out = append(out, d.Name())
	}
	return out
}

// waitPods waits until each of nodes has exactly one Ready pod of img.
func (e *env) waitPods(what, img string, nodes []string) {
	e.t.Helper()
	want := map[string]bool{}
	for _, n := range nodes {
		want[n] = true
	}
	e.wait(what, func(ctx context.Context) (bool, error) {
		pods, err := e.c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=kiosk"})
		if err != nil {
			return false, err
		}
		got := map[string]int{}
		for _, p := range pods.Items {
			if !want[p.Spec.NodeName] {
				continue
			}
			if p.DeletionTimestamp != nil || p.Spec.Containers[0].Image != img || !ready(&p) {
				return false, nil
			}
			got[p.Spec.NodeName]++
		}
		for n := range want {
			if got[n] != 1 {
				return false, nil
			}
		}
		return true, nil
	})
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitPhase waits until the policy's DaemonSet rollout of the template
// with img reaches phase, and returns its status.
func (e *env) waitPhase(what, img string, phase v1alpha1.RolloutPhase) v1alpha1.WorkloadRollout {
	e.t.Helper()
	var got v1alpha1.WorkloadRollout
	e.wait(what, func(ctx context.Context) (bool, error) {
		ds, err := e.c.AppsV1().DaemonSets(ns).Get(ctx, "kiosk", metav1.GetOptions{})
		if err != nil || ds.Spec.Template.Spec.Containers[0].Image != img {
			return false, err
		}
		rp, err := e.getPolicy(ctx)
		if err != nil {
			return false, err
		}
		w := waves.Find(rp, waves.Workload{Kind: "DaemonSet", Name: "kiosk"})
		if w == nil || w.Revision != daemonset.Hash(ds) || w.Phase != phase {
			return false, nil
		}
		got = *w
		return true, nil
	})
	return got
}

func (e *env) wait(what string, cond func(ctx context.Context) (bool, error)) {
	e.t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, cond); err != nil {
		e.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// firstPods watches pods from now on and records when each node first had
// a pod of the revision hash (the pods created for it, even transient).
type firstPods struct {
	mu    sync.Mutex
	first map[string]time.Time
	stop  func()
}

func (e *env) watchFirst(hash string) *firstPods {
	e.t.Helper()
	w, err := e.c.CoreV1().Pods(ns).Watch(context.Background(), metav1.ListOptions{LabelSelector: appsv1.ControllerRevisionHashLabelKey + "=" + hash})
	if err != nil {
		e.t.Fatal(err)
	}
	f := &firstPods{first: map[string]time.Time{}, stop: w.Stop}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			node := daemonset.TargetNode(p)
			f.mu.Lock()
			if _, seen := f.first[node]; !seen {
				f.first[node] = time.Now()
			}
			f.mu.Unlock()
		}
	}()
	e.t.Cleanup(w.Stop)
	return f
}

func (f *firstPods) nodes() map[string]time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]time.Time{}
	for k, v := range f.first {
		out[k] = v
	}
	return out
}

// assignment is the wave of each device, as the policy assigns them.
func (e *env) assignment(ctx context.Context) map[string]int {
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
	a, err := waves.Assign(rp, waves.Identity(rp, waves.Workload{Kind: "DaemonSet", Name: "kiosk"}), nodes)
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

func nodesOf(a map[string]int, wave int) []string {
	var out []string
	for n, w := range a {
		if w == wave {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

func TestBadImageStopsAtTheCanaryWaveAndIsRolledBack(t *testing.T) {
	e := start(t, 8, 2)
	e.createPolicy(policy(v1alpha1.RolloutFailureRollback, 30))
	e.createDaemonSet()
	a := e.assignment(context.Background())
	bad := e.watchFirst(e.setImage(image("bad")))

	st := e.waitPhase("the bad revision rolled back", image("bad"), v1alpha1.RolloutRolledBack)
	if st.CurrentWave != "canary" || st.Waves[0].Failed == 0 || len(st.Waves[0].FailedDevices) == 0 {
		t.Fatalf("rolled back at wave %q with %+v", st.CurrentWave, st.Waves)
	}
	if r := st.Waves[0].FailedDevices[0].Reason; r != "CrashLoopBackOff" && r != "NotReadyInTime" {
		t.Errorf("failing device's reason %q", r)
	}
	// The canaries are back on v1, and every other device never left it.
	e.waitPods("every device on v1 again", image("v1"), e.nodes())
	for node := range bad.nodes() {
		if a[node] != 0 {
			t.Errorf("the bad revision reached %s of wave %d", node, a[node])
		}
	}
	if len(bad.nodes()) == 0 {
		t.Error("the bad revision never reached the canaries: the test proves nothing")
	}
	// It stays rolled back while the DaemonSet spec still says "bad".
	time.Sleep(2 * time.Second)
	if got := e.waitPhase("still rolled back", image("bad"), v1alpha1.RolloutRolledBack); got.Revision != st.Revision {
		t.Errorf("revision %s, want %s", got.Revision, st.Revision)
	}
	for node := range bad.nodes() {
		if a[node] != 0 {
			t.Errorf("the bad revision reached %s of wave %d", node, a[node])
		}
	}
}

func TestGoodImageGoesWaveByWaveOnAStableSet(t *testing.T) {
	e := start(t, 10, 2)
	e.createPolicy(policy(v1alpha1.RolloutFailureRollback, 30))
	e.createDaemonSet()
	ctx := context.Background()
	a := e.assignment(ctx)
	if c := len(nodesOf(a, 0)); c != 2 {
		t.Fatalf("%d canaries", c)
	}
	if c := len(nodesOf(a, 1)); c != 4 {
		t.Fatalf("%d devices in the 50%% wave, want 4 of the 8 left", c)
	}
	v2 := e.watchFirst(e.setImage(image("v2")))
	st := e.waitPhase("v2 complete", image("v2"), v1alpha1.RolloutComplete)
	e.waitPods("every device on v2", image("v2"), e.nodes())
	first := v2.nodes()
	for wave := 0; wave < 2; wave++ {
		for _, early := range nodesOf(a, wave) {
			for _, late := range nodesOf(a, wave+1) {
				if !first[early].Before(first[late]) {
					t.Errorf("%s (wave %d) got v2 at %s, not before %s (wave %d) at %s",
						early, wave, first[early].Format(time.StampMilli), late, wave+1, first[late].Format(time.StampMilli))
				}
			}
		}
	}
	for i, ws := range st.Waves {
		if int(ws.Devices) != len(nodesOf(a, i)) || ws.Done != ws.Devices {
			t.Errorf("wave %s: %d devices, %d done; want %d done", ws.Name, ws.Devices, ws.Done, len(nodesOf(a, i)))
		}
	}
	// The next rollout picks the same devices for the percent wave.
	if again := e.assignment(ctx); strings.Join(nodesOf(again, 1), ",") != strings.Join(nodesOf(a, 1), ",") {
		t.Errorf("the percent wave changed from %v to %v", nodesOf(a, 1), nodesOf(again, 1))
	}
}

func TestPauseHoldsAndResumeGoesOn(t *testing.T) {
	e := start(t, 4, 1)
	e.createPolicy(policy(v1alpha1.RolloutFailurePause, 30))
	e.createDaemonSet()
	e.setPaused(true)
	hash := e.setImage(image("v2"))
	v2 := e.watchFirst(hash)
	st := e.waitPhase("the rollout paused", image("v2"), v1alpha1.RolloutPaused)
	if st.CurrentWave != "canary" {
		t.Errorf("paused at %q", st.CurrentWave)
	}
	time.Sleep(2 * time.Second)
	if got := v2.nodes(); len(got) != 0 {
		t.Fatalf("v2 reached %v while paused", got)
	}
	e.waitPods("every device still on v1", image("v1"), e.nodes())
	e.setPaused(false)
	e.waitPhase("v2 complete after resume", image("v2"), v1alpha1.RolloutComplete)
	e.waitPods("every device on v2", image("v2"), e.nodes())
}

func TestOfflineDeviceFailsOnlyAfterTheTimeout(t *testing.T) {
	const timeout = 6
	e := start(t, 3, 1)
	e.createPolicy(policy(v1alpha1.RolloutFailurePause, timeout))
	e.createDaemonSet()
	e.fleet.Devices[0].SetRenewing(false) // the canary loses its link
	e.setImage(image("v2"))
	st := e.waitPhase("the canary wave progressing", image("v2"), v1alpha1.RolloutProgressing)
	started := st.Waves[0].StartTime.Time
	// Until the timeout, the wave waits for the device.
	for time.Since(started) < (timeout-2)*time.Second {
		rp, err := e.getPolicy(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		w := waves.Find(rp, waves.Workload{Kind: "DaemonSet", Name: "kiosk"})
		if w.Phase != v1alpha1.RolloutProgressing || w.Waves[0].Failed != 0 {
			t.Fatalf("%s after the wave started (timeout %ds): phase %s, wave %+v", time.Since(started).Round(time.Millisecond), timeout, w.Phase, w.Waves[0])
		}
		time.Sleep(200 * time.Millisecond)
	}
	st = e.waitPhase("the canary wave failed", image("v2"), v1alpha1.RolloutPaused)
	fd := st.Waves[0].FailedDevices
	if len(fd) != 1 || fd[0].Node != "shop-0" || fd[0].Reason != "NotReadyInTime" {
		t.Fatalf("failed devices %+v", fd)
	}
	// The other devices never got v2.
	e.waitPods("the online devices on v1", image("v1"), e.nodes()[1:])
}

func TestNewTemplateDuringAHeldRolloutStartsANewOne(t *testing.T) {
	e := start(t, 4, 1)
	e.createPolicy(policy(v1alpha1.RolloutFailurePause, 30))
	e.createDaemonSet()
	v1, err := e.c.AppsV1().DaemonSets(ns).Get(context.Background(), "kiosk", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.setImage(image("bad"))
	held := e.waitPhase("the bad revision held at the canary", image("bad"), v1alpha1.RolloutPaused)
	if held.CurrentWave != "canary" {
		t.Fatalf("held at %q", held.CurrentWave)
	}
	e.setImage(image("v3"))
	st := e.waitPhase("v3 complete", image("v3"), v1alpha1.RolloutComplete)
	if st.Revision == held.Revision {
		t.Fatal("the held rollout's revision is still the one rolled out")
	}
	if want := daemonset.Hash(v1); st.PreviousRevision != want {
		t.Errorf("the new rollout started from %s, want v1's %s (the held revision never becomes the fallback)", st.PreviousRevision, want)
	}
	e.waitPods("every device on v3", image("v3"), e.nodes())
}

// Devices the DaemonSet does not run on (its nodeSelector leaves them
// out) join while the rollout is under way, each Node's arrival
// re-syncing the policy, and the controllers restart. The percent wave
// keeps the devices it had before.
func TestPercentWaveKeepsItsDevicesWhenUnrelatedDevicesJoin(t *testing.T) {
	e := start(t, 10, 2)
	e.nodeSelector = map[string]string{"fleet": "kiosk"}
	e.createPolicy(policy(v1alpha1.RolloutFailureRollback, 30))
	e.createDaemonSet()
	a := e.assignment(context.Background())
	if c := len(nodesOf(a, 1)); c != 4 {
		t.Fatalf("%d devices in the 50%% wave, want 4 of the 8 left", c)
	}
	v2 := e.watchFirst(e.setImage(image("v2")))
	others := e.join("other", 12)
	// The loops start over mid-rollout, from nothing but the API's state.
	e.restart()
	st := e.waitPhase("v2 complete", image("v2"), v1alpha1.RolloutComplete)
	e.waitPods("every kiosk device on v2", image("v2"), e.nodes())
	first := v2.nodes()
	for _, n := range others {
		if _, ok := first[n]; ok {
			t.Errorf("v2 went to %s, which the DaemonSet does not run on", n)
		}
	}
	for _, early := range nodesOf(a, 1) {
		for _, late := range nodesOf(a, 2) {
			if !first[early].Before(first[late]) {
				t.Errorf("%s (the percent wave before the join) got v2 at %s, not before %s (the rest) at %s",
					early, first[early].Format(time.StampMilli), late, first[late].Format(time.StampMilli))
			}
		}
	}
	for i, ws := range st.Waves {
		if int(ws.Devices) != len(nodesOf(a, i)) {
			t.Errorf("wave %s: %d devices, want %d", ws.Name, ws.Devices, len(nodesOf(a, i)))
		}
	}
}

// retry asks for the workload's failed wave to be judged again, as
// flotctl rollout retry does.
func (e *env) retry(resource string, value string) {
	e.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.AnnotationRolloutRetryRequestedAt, value)
	var err error
	if resource == "deployment" {
		_, err = e.c.AppsV1().Deployments(ns).Patch(context.Background(), "kiosk", "application/merge-patch+json", []byte(patch), metav1.PatchOptions{})
	} else {
		_, err = e.c.AppsV1().DaemonSets(ns).Patch(context.Background(), "kiosk", "application/merge-patch+json", []byte(patch), metav1.PatchOptions{})
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

// The canary is offline through its wave, which fails and holds; once it
// is back, a retry judges the wave again and the rollout goes on. A retry
// request that found nothing failed is not kept for a later failure.
func TestRetryJudgesAFailedWaveAgain(t *testing.T) {
	e := start(t, 3, 1)
	e.createPolicy(policy(v1alpha1.RolloutFailurePause, 3))
	e.createDaemonSet()
	e.retry("daemonset", "early") // nothing failed yet: answered, no effect
	e.fleet.Devices[0].SetRenewing(false)
	e.setImage(image("v2"))
	held := e.waitPhase("the canary wave failed", image("v2"), v1alpha1.RolloutPaused)
	if !meta.IsStatusConditionTrue(held.Conditions, v1alpha1.ConditionWaveFailed) || held.LastHandledRetryAt != "early" {
		t.Fatalf("held with %+v, last retry %q", held.Conditions, held.LastHandledRetryAt)
	}
	e.fleet.Devices[0].SetRenewing(true)
	time.Sleep(2 * time.Second)
	if st := e.waitPhase("still held without a retry", image("v2"), v1alpha1.RolloutPaused); st.Waves[0].Failed != 1 {
		t.Fatalf("held wave %+v", st.Waves[0])
	}
	e.retry("daemonset", "now")
	st := e.waitPhase("v2 complete after the retry", image("v2"), v1alpha1.RolloutComplete)
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionWaveFailed); c == nil || c.Status != metav1.ConditionFalse || st.LastHandledRetryAt != "now" {
		t.Errorf("conditions %+v, last retry %q", st.Conditions, st.LastHandledRetryAt)
	}
	e.waitPods("every device on v2", image("v2"), e.nodes())
}
