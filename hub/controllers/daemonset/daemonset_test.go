package daemonset

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"flotilla.dev/flotilla/api"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

var ctx = context.Background() // tests here need no cancellation

// fleet is the DaemonSet loop on a fake API; step() plays the scheduler
// (binding each pod to the node it is pinned to) and the devices (a bound
// pod is Running and Ready unless its node is listed in stuck).
type fleet struct {
	t       *testing.T
	client  *fake.Clientset
	factory informers.SharedInformerFactory
	c       *Controller
	rec     *record.FakeRecorder
	clock   *clocktesting.FakeClock
	stuck   map[string]bool
}

func newFleet(t *testing.T, objs ...runtime.Object) *fleet {
	t.Helper()
	client := fake.NewClientset(objs...)
	var n atomic.Int64
	client.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, ok := a.(k8stesting.CreateAction).GetObject().(metav1.Object)
		if !ok {
			return false, nil, nil
		}
		i := n.Add(1)
		if obj.GetName() == "" {
			obj.SetName(fmt.Sprintf("%s%05d", obj.GetGenerateName(), i))
		}
		obj.SetUID(types.UID(fmt.Sprintf("uid-%d", i)))
		obj.SetCreationTimestamp(metav1.NewTime(t0.Add(time.Duration(i) * time.Second)))
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	rec := record.NewFakeRecorder(1000)
	clk := clocktesting.NewFakeClock(t0)
	c, err := New(client, factory, rec, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, client: client, factory: factory, c: c, rec: rec, clock: clk, stuck: map[string]bool{}}
	f.refresh()
	return f
}

func (f *fleet) refresh() {
	f.t.Helper()
	ds, _ := f.client.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	pods, _ := f.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	nodes, _ := f.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	revs, _ := f.client.AppsV1().ControllerRevisions("").List(ctx, metav1.ListOptions{})
	var d []any
	for i := range revs.Items {
		d = append(d, &revs.Items[i])
	}
	must(f.t, f.factory.Apps().V1().ControllerRevisions().Informer().GetIndexer().Replace(d, ""))
	var a, b, c []any
	for i := range ds.Items {
		a = append(a, &ds.Items[i])
	}
	for i := range pods.Items {
		b = append(b, &pods.Items[i])
	}
	for i := range nodes.Items {
		c = append(c, &nodes.Items[i])
	}
	must(f.t, f.factory.Apps().V1().DaemonSets().Informer().GetIndexer().Replace(a, ""))
	must(f.t, f.factory.Core().V1().Pods().Informer().GetIndexer().Replace(b, ""))
	must(f.t, f.factory.Core().V1().Nodes().Informer().GetIndexer().Replace(c, ""))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// sync runs one sync with the cache caught up (expectations are met by
// the watch).
func (f *fleet) sync() {
	f.t.Helper()
	f.refresh()
	f.c.exp.Delete("default/agent")
	must(f.t, f.c.sync(ctx, "default/agent"))
	f.refresh()
}

func (f *fleet) step() {
	f.t.Helper()
	pods, _ := f.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	for i := range pods.Items {
		p := &pods.Items[i]
		p.Spec.NodeName = TargetNode(p)
		p.Status.Phase = corev1.PodRunning
		st := corev1.ConditionTrue
		if f.stuck[p.Spec.NodeName] && p.Labels[appsv1.ControllerRevisionHashLabelKey] == Hash(f.ds()) {
			st = corev1.ConditionFalse
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.NewTime(t0)}}
		_, err := f.client.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{})
		must(f.t, err)
	}
	f.refresh()
}

func (f *fleet) ds() *appsv1.DaemonSet {
	d, err := f.client.AppsV1().DaemonSets("default").Get(ctx, "agent", metav1.GetOptions{})
	must(f.t, err)
	return d
}

// pods returns "node:hash-is-current" for each pod, sorted.
func (f *fleet) pods() []string {
	pods, _ := f.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	h := Hash(f.ds())
	var out []string
	for _, p := range pods.Items {
		v := "old"
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] == h {
			v = "new"
		}
		out = append(out, TargetNode(&p)+":"+v)
	}
	sort.Strings(out)
	return out
}

func node(name string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
}

func daemonSet(strategy appsv1.DaemonSetUpdateStrategy) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default", UID: "ds-uid", Generation: 1},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"site": "shop"},
					Containers:   []corev1.Container{{Name: "agent", Image: "agent:v1"}},
				},
			},
			UpdateStrategy: strategy,
		},
	}
}

var shop = map[string]string{"site": "shop"}

func rolling(surge, unavailable int32) appsv1.DaemonSetUpdateStrategy {
	return appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: &appsv1.RollingUpdateDaemonSet{
		MaxSurge: ptr.To(intstr.FromInt32(surge)), MaxUnavailable: ptr.To(intstr.FromInt32(unavailable))}}
}

func TestEligibleNodes(t *testing.T) {
	f := newFleet(t,
		daemonSet(rolling(0, 1)),
		node("plain", shop),
		node("dedicated", shop, corev1.Taint{Key: "dedicated", Value: "pos", Effect: corev1.TaintEffectNoSchedule}),
		node("warehouse", map[string]string{"site": "warehouse"}),
		node("unreachable", shop, corev1.Taint{Key: TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}),
		node("cordoned", shop, corev1.Taint{Key: TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}),
		node("soft", shop, corev1.Taint{Key: "x", Effect: corev1.TaintEffectPreferNoSchedule}),
	)
	f.sync()
	got := strings.Join(f.pods(), " ")
	if want := "cordoned:new plain:new soft:new unreachable:new"; got != want {
		t.Fatalf("pods %s, want %s", got, want)
	}
	pods, _ := f.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	p := pods.Items[0]
	if p.Spec.NodeName != "" {
		t.Errorf("pod created bound to %s; the scheduler binds it", p.Spec.NodeName)
	}
	if TargetNode(&p) == "" {
		t.Errorf("pod affinity %+v does not pin a node", p.Spec.Affinity)
	}
	keys := map[string]corev1.TaintEffect{}
	for _, tol := range p.Spec.Tolerations {
		keys[tol.Key] = tol.Effect
	}
	for _, k := range []string{TaintNodeNotReady, TaintNodeUnreachable, TaintNodeDiskPressure, TaintNodeMemoryPressure, TaintNodePIDPressure, TaintNodeUnschedulable} {
		if _, ok := keys[k]; !ok {
			t.Errorf("daemon pod lacks the %s toleration: %v", k, p.Spec.Tolerations)
		}
	}
	if ref := metav1.GetControllerOf(&p); ref == nil || ref.Kind != "DaemonSet" {
		t.Errorf("owner %+v", ref)
	}
	f.step()
	f.sync()
	st := f.ds().Status
	if st.DesiredNumberScheduled != 4 || st.CurrentNumberScheduled != 4 || st.NumberReady != 4 || st.NumberAvailable != 4 ||
		st.UpdatedNumberScheduled != 4 || st.NumberMisscheduled != 0 || st.NumberUnavailable != 0 || st.ObservedGeneration != 1 {
		t.Fatalf("status %+v", st)
	}

	// A node joins and gets its pod; a node leaving the shop loses its pod.
	_, err := f.client.CoreV1().Nodes().Create(ctx, node("newcomer", shop), metav1.CreateOptions{})
	must(t, err)
	n, _ := f.client.CoreV1().Nodes().Get(ctx, "plain", metav1.GetOptions{})
	n.Labels = map[string]string{"site": "lab"}
	_, err = f.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	must(t, err)
	f.sync()
	if got, want := strings.Join(f.pods(), " "), "cordoned:new newcomer:new soft:new unreachable:new"; got != want {
		t.Fatalf("after a join and a relabel: %s, want %s", got, want)
	}
}

// A node tainted NoExecute after the fact keeps nothing; one tainted
// NoSchedule keeps its pod (it is tolerated to continue).
func TestShouldRun(t *testing.T) {
	ds := daemonSet(rolling(0, 1))
	for _, tc := range []struct {
		node             *corev1.Node
		run, keepRunning bool
	}{
		{node("a", shop), true, true},
		{node("b", nil), false, false},
		{node("c", shop, corev1.Taint{Key: "k", Effect: corev1.TaintEffectNoSchedule}), false, true},
		{node("d", shop, corev1.Taint{Key: "k", Effect: corev1.TaintEffectNoExecute}), false, false},
		{node("e", shop, corev1.Taint{Key: TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute}), true, true},
	} {
		run, keep := ShouldRun(ds, tc.node)
		if run != tc.run || keep != tc.keepRunning {
			t.Errorf("node %s: ShouldRun = %v, %v; want %v, %v", tc.node.Name, run, keep, tc.run, tc.keepRunning)
		}
	}
	aff := daemonSet(rolling(0, 1))
	aff.Spec.Template.Spec.NodeSelector = nil
	aff.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"arm64"}}}}},
	}}}
	if run, _ := ShouldRun(aff, node("x86", map[string]string{"arch": "amd64"})); run {
		t.Error("required node affinity arch=arm64 matched an amd64 node")
	}
	if run, _ := ShouldRun(aff, node("pi", map[string]string{"arch": "arm64"})); !run {
		t.Error("required node affinity arch=arm64 refused an arm64 node")
	}
}

func setImage(t *testing.T, f *fleet, image string) {
	ds := f.ds()
	ds.Spec.Template.Spec.Containers[0].Image = image
	ds.Generation++
	_, err := f.client.AppsV1().DaemonSets("default").Update(ctx, ds, metav1.UpdateOptions{})
	must(t, err)
}

func unavailableCount(f *fleet) int {
	pods, _ := f.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	ready := map[string]bool{}
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready[TargetNode(&p)] = true
			}
		}
	}
	return 3 - len(ready)
}

func TestRollingUpdateMaxUnavailable(t *testing.T) {
	f := newFleet(t, daemonSet(rolling(0, 1)), node("n1", shop), node("n2", shop), node("n3", shop))
	f.sync()
	f.step()
	setImage(t, f, "agent:v2")
	for i := 0; i < 12 && strings.Join(f.pods(), " ") != "n1:new n2:new n3:new"; i++ {
		f.sync()
		if u := unavailableCount(f); u > 1 {
			t.Fatalf("%d nodes without a ready daemon pod, maxUnavailable is 1 (%v)", u, f.pods())
		}
		f.step()
	}
	if got := strings.Join(f.pods(), " "); got != "n1:new n2:new n3:new" {
		t.Fatalf("rollout ended with %s", got)
	}
}

func TestRollingUpdateMaxSurge(t *testing.T) {
	f := newFleet(t, daemonSet(rolling(1, 0)), node("n1", shop), node("n2", shop), node("n3", shop))
	f.sync()
	f.step()
	setImage(t, f, "agent:v2")
	f.sync()
	// One new pod beside its old one; nobody lost their pod.
	if got := strings.Join(f.pods(), " "); got != "n1:new n1:old n2:old n3:old" {
		t.Fatalf("first surge step: %s", got)
	}
	// The new pod is not ready: the old one stays, no second surge.
	f.stuck["n1"] = true
	f.step()
	f.sync()
	if got := strings.Join(f.pods(), " "); got != "n1:new n1:old n2:old n3:old" {
		t.Fatalf("surge with an unready new pod: %s", got)
	}
	delete(f.stuck, "n1")
	for i := 0; i < 12 && strings.Join(f.pods(), " ") != "n1:new n2:new n3:new"; i++ {
		f.step()
		f.sync()
		if u := unavailableCount(f); u > 0 {
			t.Fatalf("%d nodes without a ready daemon pod during a surge rollout (%v)", u, f.pods())
		}
	}
	if got := strings.Join(f.pods(), " "); got != "n1:new n2:new n3:new" {
		t.Fatalf("surge rollout ended with %s", got)
	}
}

func TestOnDelete(t *testing.T) {
	f := newFleet(t, daemonSet(appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}), node("n1", shop), node("n2", shop))
	f.sync()
	f.step()
	setImage(t, f, "agent:v2")
	f.sync()
	if got := strings.Join(f.pods(), " "); got != "n1:old n2:old" {
		t.Fatalf("OnDelete replaced pods by itself: %s", got)
	}
	pods, _ := f.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		if TargetNode(&p) == "n1" {
			must(t, f.client.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{}))
		}
	}
	f.sync()
	if got := strings.Join(f.pods(), " "); got != "n1:new n2:old" {
		t.Fatalf("after deleting n1's pod: %s, want an updated pod there", got)
	}
	f.sync() // status counts what the cache shows, and it now shows the new pod
	if st := f.ds().Status; st.UpdatedNumberScheduled != 1 || st.DesiredNumberScheduled != 2 {
		t.Fatalf("status %+v, want 1 of 2 updated", st)
	}
}

func TestFailedPodReplacedWithBackoff(t *testing.T) {
	f := newFleet(t, daemonSet(rolling(0, 1)), node("n1", shop))
	f.sync()
	f.step()
	pods, _ := f.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	p := pods.Items[0]
	p.Status.Phase = corev1.PodFailed
	_, err := f.client.CoreV1().Pods("default").Update(ctx, &p, metav1.UpdateOptions{})
	must(t, err)
	f.sync()
	got := f.pods()
	if len(got) != 1 || got[0] != "n1:new" {
		t.Fatalf("pods %v, want the failed one replaced", got)
	}
	found := false
	for len(f.rec.Events) > 0 {
		if strings.HasPrefix(<-f.rec.Events, "Warning FailedDaemonPod") {
			found = true
		}
	}
	if !found {
		t.Error("no FailedDaemonPod event")
	}
	// The replacement fails at once too: within the backoff it is left.
	pods, _ = f.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	p = pods.Items[0]
	p.Status.Phase = corev1.PodFailed
	_, err = f.client.CoreV1().Pods("default").Update(ctx, &p, metav1.UpdateOptions{})
	must(t, err)
	f.sync()
	pods, _ = f.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if len(pods.Items) != 1 || pods.Items[0].Name != p.Name {
		t.Fatalf("failed pod deleted again within the backoff")
	}
	f.clock.Step(3 * time.Second)
	f.sync()
	pods, _ = f.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if len(pods.Items) != 1 || pods.Items[0].Name == p.Name {
		t.Fatalf("failed pod not replaced after the backoff")
	}
}

// With flotilla.dev/prepull, an old pod is stopped only once its device
// reports the new images present; a device that cannot pull them keeps
// its old pod, and the rollout goes on elsewhere.
func TestRollingUpdatePrepull(t *testing.T) {
	ds := daemonSet(rolling(0, 1))
	ds.Annotations = map[string]string{api.AnnotationPrepull: "true"}
	ds.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "agent:v1"}}
	f := newFleet(t, ds, node("n1", shop), node("n2", shop), node("n3", shop))
	f.sync()
	f.step()
	setImage(t, f, "agent:v2")

	f.sync()
	if got := strings.Join(f.pods(), " "); got != "n1:old n2:old n3:old" {
		t.Fatalf("before any device prepulled: %s", got)
	}
	pods, _ := f.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		if got := p.Annotations[api.AnnotationPrepullImages]; got != "agent:v1,agent:v2" {
			t.Fatalf("pod %s announces %q, want every image of the new template once", p.Name, got)
		}
	}
	if !hasEvent(f.rec, "Normal Prepull Asked 3 device(s) to pull agent:v1,agent:v2") {
		t.Error("no Prepull event")
	}

	// The devices answer; n2's cannot verify the image.
	answer := func(node string, status corev1.ConditionStatus, msg string) {
		t.Helper()
		pods, _ := f.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		for i := range pods.Items {
			p := &pods.Items[i]
			if TargetNode(p) != node || p.Labels[appsv1.ControllerRevisionHashLabelKey] == Hash(f.ds()) {
				continue
			}
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: api.ConditionImagesPrepulled, Status: status, Message: msg})
			_, err := f.client.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{})
			must(t, err)
		}
	}
	answer("n1", corev1.ConditionTrue, "agent:v1,agent:v2")
	answer("n2", corev1.ConditionFalse, `image "agent:v2" for the next revision: no signature`)
	answer("n3", corev1.ConditionTrue, "agent:v0") // an older announcement
	f.refresh()
	f.stuck = map[string]bool{}
	for i := 0; i < 12; i++ {
		f.sync()
		if u := unavailableCount(f); u > 1 {
			t.Fatalf("%d nodes without a ready daemon pod, maxUnavailable is 1 (%v)", u, f.pods())
		}
		f.stepKeeping()
	}
	if got := strings.Join(f.pods(), " "); got != "n1:new n2:old n3:old" {
		t.Fatalf("rollout ended with %s, want only the prepulled device replaced", got)
	}

	// n2's signature is fixed and n3 answers for the current images.
	answer("n2", corev1.ConditionTrue, "agent:v1,agent:v2")
	answer("n3", corev1.ConditionTrue, "agent:v1,agent:v2")
	f.refresh()
	for i := 0; i < 12 && strings.Join(f.pods(), " ") != "n1:new n2:new n3:new"; i++ {
		f.sync()
		if u := unavailableCount(f); u > 1 {
			t.Fatalf("%d nodes without a ready daemon pod, maxUnavailable is 1 (%v)", u, f.pods())
		}
		f.stepKeeping()
	}
	if got := strings.Join(f.pods(), " "); got != "n1:new n2:new n3:new" {
		t.Fatalf("rollout ended with %s", got)
	}
}

// stepKeeping is step, keeping the prepull condition a device reported.
func (f *fleet) stepKeeping() {
	f.t.Helper()
	pods, _ := f.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	kept := map[string]corev1.PodCondition{}
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == api.ConditionImagesPrepulled {
				kept[p.Name] = c
			}
		}
	}
	f.step()
	for name, c := range kept {
		p, err := f.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		must(f.t, err)
		p.Status.Conditions = append(p.Status.Conditions, c)
		_, err = f.client.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{})
		must(f.t, err)
	}
	f.refresh()
}

func hasEvent(rec *record.FakeRecorder, want string) bool {
	for {
		select {
		case e := <-rec.Events:
			if strings.HasPrefix(e, want) {
				return true
			}
		default:
			return false
		}
	}
}

// revisions returns "number:image" of the DaemonSet's ControllerRevisions,
// oldest first.
func (f *fleet) revisions() []string {
	f.t.Helper()
	l, err := f.client.AppsV1().ControllerRevisions("default").List(ctx, metav1.ListOptions{})
	must(f.t, err)
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Revision < l.Items[j].Revision })
	var out []string
	for _, r := range l.Items {
		var data struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		must(f.t, json.Unmarshal(r.Data.Raw, &data))
		out = append(out, fmt.Sprintf("%d:%s", r.Revision, data.Spec.Template.Spec.Containers[0].Image))
	}
	return out
}

// TestControllerRevisions: every template a DaemonSet had is a numbered
// ControllerRevision, as kubectl rollout history and undo read them; going
// back to an old template makes its revision the newest; the history is
// pruned to revisionHistoryLimit, never of a revision a pod still runs.
func TestControllerRevisions(t *testing.T) {
	ds := daemonSet(rolling(0, 3))
	ds.Annotations = map[string]string{"kubernetes.io/change-cause": "first"}
	f := newFleet(t, ds, node("n1", shop), node("n2", shop))
	f.sync()
	f.step()
	if got := f.revisions(); !slices.Equal(got, []string{"1:agent:v1"}) {
		t.Fatalf("after the first sync: %v", got)
	}
	r, err := f.client.AppsV1().ControllerRevisions("default").Get(ctx, "agent-"+Hash(f.ds()), metav1.GetOptions{})
	must(t, err)
	if !metav1.IsControlledBy(r, f.ds()) || r.Labels["app"] != "agent" || r.Labels[appsv1.ControllerRevisionHashLabelKey] != Hash(f.ds()) ||
		r.Annotations["kubernetes.io/change-cause"] != "first" || !strings.Contains(string(r.Data.Raw), `"$patch":"replace"`) {
		t.Errorf("revision %s: owner %v, labels %v, annotations %v, data %s", r.Name, r.OwnerReferences, r.Labels, r.Annotations, r.Data.Raw)
	}
	roll := func(image string) {
		t.Helper()
		setImage(t, f, image)
		for range 6 {
			f.sync()
			f.step()
		}
	}
	roll("agent:v2")
	roll("agent:v3")
	if got := f.revisions(); !slices.Equal(got, []string{"1:agent:v1", "2:agent:v2", "3:agent:v3"}) {
		t.Fatalf("after two updates: %v", got)
	}
	// Undo to v1: its revision becomes number 4.
	roll("agent:v1")
	if got := f.revisions(); !slices.Equal(got, []string{"2:agent:v2", "3:agent:v3", "4:agent:v1"}) {
		t.Fatalf("after going back to v1: %v", got)
	}
	// A limit of one old revision: v2 goes, v3 stays.
	d := f.ds()
	d.Spec.RevisionHistoryLimit = ptr.To(int32(1))
	_, err = f.client.AppsV1().DaemonSets("default").Update(ctx, d, metav1.UpdateOptions{})
	must(t, err)
	f.sync()
	if got := f.revisions(); !slices.Equal(got, []string{"3:agent:v3", "4:agent:v1"}) {
		t.Fatalf("with revisionHistoryLimit 1: %v", got)
	}
	// No old revision kept, but one its pods still run is: during a
	// rollout the old template stays until no pod has it.
	d = f.ds()
	d.Spec.RevisionHistoryLimit = ptr.To(int32(0))
	d.Spec.Template.Spec.Containers[0].Image = "agent:v4"
	_, err = f.client.AppsV1().DaemonSets("default").Update(ctx, d, metav1.UpdateOptions{})
	must(t, err)
	f.sync()
	if got := f.revisions(); !slices.Equal(got, []string{"4:agent:v1", "5:agent:v4"}) {
		t.Fatalf("mid-rollout with revisionHistoryLimit 0: %v, want v1 kept while its pods run", got)
	}
	for range 6 {
		f.sync()
		f.step()
	}
	if got := f.revisions(); !slices.Equal(got, []string{"5:agent:v4"}) {
		t.Fatalf("after the rollout with revisionHistoryLimit 0: %v", got)
	}
}
