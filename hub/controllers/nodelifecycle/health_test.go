package nodelifecycle

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"flotilla.dev/flotilla/api"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type env struct {
	t        *testing.T
	ctx      context.Context
	client   *fake.Clientset
	clock    *testingclock.FakeClock
	recorder *record.FakeRecorder
	c        *Controller
}

// newEnv starts the controller's informers (not its loops) over objs; the
// test drives health passes with pass().
func newEnv(t *testing.T, cfg Config, objs ...runtime.Object) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, client: fake.NewSimpleClientset(objs...), clock: testingclock.NewFakeClock(t0), recorder: record.NewFakeRecorder(1000)}
	cfg.Clock = e.clock
	cfg.Recorder = e.recorder
	factory := informers.NewSharedInformerFactory(e.client, 0)
	c, err := New(e.client, factory, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		t.Fatal("caches did not sync")
	}
	c.start = e.clock.Now()
	return e
}

// settle waits until the informers show what the API holds, so a pass
// sees the previous pass's writes.
func (e *env) settle() {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		nodes, _ := e.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		for i := range nodes.Items {
			cached, err := e.c.nodeLister.Get(nodes.Items[i].Name)
			if err != nil || !reflect.DeepEqual(cached, &nodes.Items[i]) {
				return false, nil
			}
		}
		pods, _ := e.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if len(e.c.podIndexer.List()) != len(pods.Items) {
			return false, nil
		}
		for i := range pods.Items {
			obj, ok, _ := e.c.podIndexer.GetByKey(pods.Items[i].Namespace + "/" + pods.Items[i].Name)
			if !ok || !reflect.DeepEqual(obj, &pods.Items[i]) {
				return false, nil
			}
		}
		leases, _ := e.client.CoordinationV1().Leases(api.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
		for i := range leases.Items {
			cached, err := e.c.leaseLister.Leases(api.NamespaceNodeLease).Get(leases.Items[i].Name)
			if err != nil || !reflect.DeepEqual(cached, &leases.Items[i]) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		e.t.Fatal("informers never caught up with the API")
	}
}

func (e *env) pass() {
	e.t.Helper()
	e.settle()
	if err := e.c.monitor(e.ctx); err != nil {
		e.t.Fatalf("monitor: %v", err)
	}
	e.settle()
}

// advance moves the clock by d, renewing the leases of alive nodes
// first, then runs a pass.
func (e *env) advance(d time.Duration, alive ...string) {
	e.t.Helper()
	e.clock.Step(d)
	for _, n := range alive {
		e.renew(n)
	}
	e.pass()
}

func (e *env) renew(node string) {
	e.t.Helper()
	l, err := e.client.CoordinationV1().Leases(api.NamespaceNodeLease).Get(e.ctx, node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	l.Spec.RenewTime = &metav1.MicroTime{Time: e.clock.Now()}
	if _, err := e.client.CoordinationV1().Leases(api.NamespaceNodeLease).Update(e.ctx, l, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) node(name string) *corev1.Node {
	e.t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) podExists(name string) bool {
	e.t.Helper()
	_, err := e.client.CoreV1().Pods("default").Get(e.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return true
}

func (e *env) podReady(name string) corev1.ConditionStatus {
	e.t.Helper()
	p, err := e.client.CoreV1().Pods("default").Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status
		}
	}
	return ""
}

func readyNode(name string, labels ...string) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec:       corev1.NodeSpec{PodCIDR: "", Taints: []corev1.Taint{{Key: "site", Value: "x", Effect: corev1.TaintEffectPreferNoSchedule}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.NewTime(t0.Add(-time.Hour))},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: metav1.NewTime(t0.Add(-time.Hour))},
		}},
	}
	for i := 0; i+1 < len(labels); i += 2 {
		n.Labels[labels[i]] = labels[i+1]
	}
	return n
}

func lease(node string, renew time.Time) *coordv1.Lease {
	return &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: api.NamespaceNodeLease, Name: node},
		Spec:       coordv1.LeaseSpec{HolderIdentity: &node, RenewTime: &metav1.MicroTime{Time: renew}},
	}
}

func seconds(s int64) *int64 { return &s }

func readyPod(name, node string, mods ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "img"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

func tolerateUnreachable(secs *int64) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{
			Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists,
			Effect: corev1.TaintEffectNoExecute, TolerationSeconds: secs})
	}
}

func ownedBy(kind string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: "owner", UID: "owner-uid", Controller: &yes}}
	}
}

func mirror(p *corev1.Pod) {
	p.Annotations = map[string]string{api.AnnotationMirrorPod: "hash"}
}

// fleet is four nodes, all renewing at t0; "quiet" will stop.
func fleet(extra ...runtime.Object) []runtime.Object {
	objs := []runtime.Object{}
	for _, n := range []string{"quiet", "a", "b", "c"} {
		objs = append(objs, readyNode(n), lease(n, t0))
	}
	return append(objs, extra...)
}

func unreachableTaints(n *corev1.Node) map[corev1.TaintEffect]bool {
	out := map[corev1.TaintEffect]bool{}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeUnreachable {
			out[t.Effect] = true
		}
	}
	return out
}

func TestQuietNodeBecomesUnknownAndTainted(t *testing.T) {
	e := newEnv(t, Config{}, fleet(readyPod("p", "quiet", tolerateUnreachable(seconds(300))))...)
	e.advance(30*time.Second, "a", "b", "c")
	if r := readyCondition(e.node("quiet")); r.Status != corev1.ConditionTrue {
		t.Fatalf("quiet node %s after 30s, want still True", r.Status)
	}
	e.advance(11*time.Second, "a", "b", "c")
	n := e.node("quiet")
	for _, c := range n.Status.Conditions {
		if c.Status != corev1.ConditionUnknown || c.Reason != "NodeStatusUnknown" || c.Message != "Kubelet stopped posting node status." {
			t.Errorf("condition %s = %s %s %q", c.Type, c.Status, c.Reason, c.Message)
		}
		if !c.LastTransitionTime.Time.Equal(e.clock.Now()) {
			t.Errorf("condition %s transition time %v", c.Type, c.LastTransitionTime)
		}
	}
	if got := unreachableTaints(n); !got[corev1.TaintEffectNoSchedule] || !got[corev1.TaintEffectNoExecute] {
		t.Errorf("unreachable taints %v, want NoSchedule and NoExecute", got)
	}
	if len(n.Spec.Taints) != 3 {
		t.Errorf("other taints lost: %v", n.Spec.Taints)
	}
	if got := e.podReady("p"); got != corev1.ConditionFalse {
		t.Errorf("pod on Unknown node Ready=%s, want False", got)
	}
	for _, name := range []string{"a", "b", "c"} {
		if r := readyCondition(e.node(name)); r.Status != corev1.ConditionTrue || len(unreachableTaints(e.node(name))) != 0 {
			t.Errorf("renewing node %s touched", name)
		}
	}
	select {
	case ev := <-e.recorder.Events:
		if ev != "Normal NodeNotReady Node quiet status is now: NodeNotReady" {
			t.Errorf("event %q", ev)
		}
	default:
		t.Error("no NodeNotReady event")
	}

	// The device comes back: renews and posts Ready.
	e.clock.Step(5 * time.Second)
	e.renew("quiet")
	n = e.node("quiet")
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(e.clock.Now())}}
	if _, err := e.client.CoreV1().Nodes().UpdateStatus(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.advance(0, "a", "b", "c")
	if got := unreachableTaints(e.node("quiet")); len(got) != 0 {
		t.Errorf("taints %v stay after the node came back", got)
	}
	if !e.podExists("p") {
		t.Error("tolerating pod evicted although the node came back in time")
	}
}

func TestNodeThatNeverPostedStatus(t *testing.T) {
	n := readyNode("new")
	n.Status.Conditions = nil
	e := newEnv(t, Config{}, n, readyNode("a"), lease("a", t0), readyNode("b"), lease("b", t0))
	e.advance(41*time.Second, "a", "b")
	r := readyCondition(e.node("new"))
	if r == nil || r.Status != corev1.ConditionUnknown || r.Reason != "NodeStatusNeverUpdated" || r.Message != "Kubelet never posted node status." {
		t.Fatalf("Ready = %+v", r)
	}
}

func TestEvictions(t *testing.T) {
	e := newEnv(t, Config{}, fleet(
		readyPod("plain", "quiet"),
		readyPod("tolerates-300", "quiet", tolerateUnreachable(seconds(300))),
		readyPod("tolerates-forever", "quiet", tolerateUnreachable(nil)),
		readyPod("daemon", "quiet", ownedBy("DaemonSet")),
		readyPod("static", "quiet", mirror),
		readyPod("elsewhere", "a"),
	)...)
	e.advance(41*time.Second, "a", "b", "c")
	// The first pass marks and taints; the next one (5s later) sees the
	// taint and evicts what does not tolerate it.
	e.advance(5*time.Second, "a", "b", "c")
	if e.podExists("plain") {
		t.Error("pod without toleration not evicted")
	}
	want := "Normal TaintManagerEviction Marking for deletion Pod default/plain"
	found := false
	for len(e.recorder.Events) > 0 {
		if <-e.recorder.Events == want {
			found = true
		}
	}
	if !found {
		t.Errorf("no event %q", want)
	}
	e.advance(290*time.Second, "a", "b", "c")
	if !e.podExists("tolerates-300") {
		t.Fatal("pod evicted before its 300 s toleration ran out")
	}
	e.advance(10*time.Second, "a", "b", "c")
	if e.podExists("tolerates-300") {
		t.Error("pod not evicted after its toleration ran out")
	}
	e.advance(time.Hour, "a", "b", "c")
	for _, name := range []string{"tolerates-forever", "daemon", "static", "elsewhere"} {
		if !e.podExists(name) {
			t.Errorf("pod %s evicted", name)
		}
	}
	if got := e.podReady("daemon"); got != corev1.ConditionFalse {
		t.Errorf("exempt pod on Unknown node Ready=%s, want False", got)
	}
}

func TestAutonomyNodeNeverEvicts(t *testing.T) {
	objs := fleet(readyPod("p", "quiet"))
	objs[0].(*corev1.Node).Labels[api.LabelAutonomy] = "true"
	e := newEnv(t, Config{}, objs...)
	e.advance(41*time.Second, "a", "b", "c")
	e.advance(time.Hour, "a", "b", "c")
	if r := readyCondition(e.node("quiet")); r.Status != corev1.ConditionUnknown {
		t.Errorf("autonomous node Ready=%s, want Unknown", r.Status)
	}
	if !e.podExists("p") {
		t.Error("pod on autonomous node evicted")
	}
}

func TestNoEvictionsWhenMostNodesVanish(t *testing.T) {
	e := newEnv(t, Config{}, fleet(readyPod("p", "quiet"), readyPod("q", "a"))...)
	// Three of four stop at once: 75% > 55%.
	e.advance(41*time.Second, "c")
	e.advance(time.Hour, "c")
	for _, n := range []string{"quiet", "a", "b"} {
		if r := readyCondition(e.node(n)); r.Status != corev1.ConditionUnknown {
			t.Errorf("node %s Ready=%s, want Unknown", n, r.Status)
		}
	}
	if !e.podExists("p") || !e.podExists("q") {
		t.Fatal("pods evicted while most nodes were unreachable")
	}
	// Two come back (one of four unreachable): evictions resume.
	for _, n := range []string{"a", "b"} {
		e.renew(n)
		node := e.node(n)
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(e.clock.Now())}}
		if _, err := e.client.CoreV1().Nodes().UpdateStatus(e.ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.advance(time.Second, "a", "b", "c")
	if e.podExists("p") {
		t.Error("evictions did not resume once most nodes were back")
	}
	if !e.podExists("q") {
		t.Error("pod on a node that came back was evicted")
	}
}

func TestRestartWaitsAFullGracePeriod(t *testing.T) {
	// The hub was down for an hour: every lease looks ancient, and one node
	// was already marked Unknown and tainted by the previous run.
	old := t0.Add(-time.Hour)
	marked := readyNode("marked")
	markUnknown(marked, old)
	marked.Spec.Taints = append(marked.Spec.Taints,
		corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &metav1.Time{Time: old}},
		corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &metav1.Time{Time: old}})
	objs := []runtime.Object{marked, lease("marked", old), readyPod("p", "marked")}
	for i := range 4 {
		n := fmt.Sprintf("n%d", i)
		objs = append(objs, readyNode(n), lease(n, old))
	}
	e := newEnv(t, Config{}, objs...)
	e.advance(39 * time.Second)
	for i := range 4 {
		if r := readyCondition(e.node(fmt.Sprintf("n%d", i))); r.Status != corev1.ConditionTrue {
			t.Fatalf("node marked %s %v after a restart, before a grace period", r.Status, e.clock.Now().Sub(t0))
		}
	}
	if !e.podExists("p") {
		t.Fatal("pod evicted right after a restart")
	}
	// The marked node's device reconnects within the grace period.
	e.renew("marked")
	n := e.node("marked")
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(e.clock.Now())}}
	if _, err := e.client.CoreV1().Nodes().UpdateStatus(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.advance(2*time.Second, "marked", "n0", "n1", "n2")
	if !e.podExists("p") || len(unreachableTaints(e.node("marked"))) != 0 {
		t.Fatal("reconnected node still tainted or its pod evicted")
	}
	// n3 never reconnects: Unknown once the grace period is over.
	e.advance(5*time.Second, "marked", "n0", "n1", "n2")
	if r := readyCondition(e.node("n3")); r.Status != corev1.ConditionUnknown {
		t.Fatalf("n3 Ready=%s after the grace period, want Unknown", r.Status)
	}
}

func TestCustomFigures(t *testing.T) {
	e := newEnv(t, Config{GracePeriod: 10 * time.Second, DisruptionThreshold: 0.2}, fleet(readyPod("p", "quiet"))...)
	e.advance(11*time.Second, "a", "b", "c")
	if r := readyCondition(e.node("quiet")); r.Status != corev1.ConditionUnknown {
		t.Fatalf("Ready=%s after the 10 s grace period", r.Status)
	}
	e.advance(time.Minute, "a", "b", "c")
	// 1 of 4 unreachable is more than the 20% threshold: no eviction.
	if !e.podExists("p") {
		t.Fatal("evicted above the configured disruption threshold")
	}
}

func TestConfigValidation(t *testing.T) {
	client := fake.NewSimpleClientset()
	for _, cfg := range []Config{
		{ClusterCIDR: "10.42.0.0/33"},
		{NodeCIDRMaskSize: 8},
		{DisruptionThreshold: 1.5},
		{GracePeriod: -time.Second},
	} {
		if _, err := New(client, informers.NewSharedInformerFactory(client, 0), cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		} else if !strings.Contains(err.Error(), "node lifecycle config") {
			t.Errorf("error %q does not say where", err)
		}
	}
}
