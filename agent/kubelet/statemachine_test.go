package kubelet_test

// Unit tests of the kubelet's state machine: a real kubelet.Kubelet on
// the in-memory fakes of package kubelettest and a fake clientset. They
// need no root, containerd or network.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"

	"flotilla.dev/flotilla/agent/cni"
	"flotilla.dev/flotilla/agent/hubclient/fromclientset"
	"flotilla.dev/flotilla/agent/kubelet"
	"flotilla.dev/flotilla/agent/kubelet/kubelettest"
	"flotilla.dev/flotilla/agent/runtime"
	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/registry"
	"flotilla.dev/flotilla/registry/trust"
)

const (
	smNode   = "dev-sm"
	smImage  = "registry.example.com/app:1"
	smWait   = 10 * time.Second
	smPoll   = 5 * time.Millisecond
	smHostIP = "192.0.2.10"
)

var podsResource = corev1.SchemeGroupVersion.WithResource("pods")

// smHarness is one device: a kubelet on fakes, and a fake hub.
type smHarness struct {
	t      *testing.T
	client *fake.Clientset
	rt     *kubelettest.Runtime
	net    *kubelettest.Network
	images *kubelettest.Images
	cfg    kubelet.Config

	mu       sync.Mutex
	statuses map[string][]corev1.PodStatus // every status written, by pod name
}

func newSMHarness(t *testing.T, pods ...*corev1.Pod) *smHarness {
	t.Helper()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: smNode},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: smHostIP}}},
	}
	objs := []k8sruntime.Object{node}
	for _, p := range pods {
		objs = append(objs, p)
	}
	h := &smHarness{
		t: t, client: fake.NewSimpleClientset(objs...),
		rt: kubelettest.NewRuntime(), net: kubelettest.NewNetwork(), images: kubelettest.NewImages(smImage),
		statuses: map[string][]corev1.PodStatus{},
	}
	h.rt.UseImages(h.images)
	// The fake clientset replaces the whole object on UpdateStatus; the
	// API server changes only the status. The kubelet writes statuses
	// from its informer's copy, which may be older than a test's update
	// (a deletionTimestamp), so do as the API server does.
	h.client.PrependReactor("update", "pods", h.updateStatus)
	h.client.PrependWatchReactor("*", h.watchList)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("FLOTILLA_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	h.cfg = kubelet.Config{
		NodeName: smNode, Client: fromclientset.New(h.client), Runtime: h.rt, Network: h.net, Puller: h.images,
		RootDir: t.TempDir(), Log: log,
		Allocatable:          corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("4Gi")},
		CrashLoopBackoff:     kubelet.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Reset: time.Minute},
		ImagePullBackoff:     kubelet.Backoff{Initial: 200 * time.Millisecond, Max: time.Second},
		SyncErrorBackoff:     kubelet.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		ResyncInterval:       200 * time.Millisecond,
		HousekeepingInterval: 100 * time.Millisecond,
		MinGracePeriod:       50 * time.Millisecond,
		OrphanGracePeriod:    300 * time.Millisecond,
	}
	return h
}

func (h *smHarness) updateStatus(a k8stesting.Action) (bool, k8sruntime.Object, error) {
	ua, ok := a.(k8stesting.UpdateAction)
	if !ok || ua.GetSubresource() != "status" {
		return false, nil, nil
	}
	in := ua.GetObject().(*corev1.Pod)
	obj, err := h.client.Tracker().Get(podsResource, in.Namespace, in.Name)
	if err != nil {
		return true, nil, err
	}
	cur := obj.(*corev1.Pod).DeepCopy()
	if in.UID != "" && in.UID != cur.UID {
		return true, nil, apierrors.NewConflict(podsResource.GroupResource(), in.Name, errors.New("UID mismatch"))
	}
	cur.Status = *in.Status.DeepCopy()
	if err := h.client.Tracker().Update(podsResource, cur, cur.Namespace); err != nil {
		return true, nil, err
	}
	h.mu.Lock()
	h.statuses[cur.Name] = append(h.statuses[cur.Name], *cur.Status.DeepCopy())
	h.mu.Unlock()
	return true, cur.DeepCopy(), nil
}

// watchList answers a watch-list request (what client-go's informers
// send first) as the API server does: the existing objects, then a
// bookmark that marks the end of the initial events. The fake clientset
// sends no such bookmark, and the kubelet's informers, which cannot tell
// it does not support watch-list, would wait 10 s for it before listing.
func (h *smHarness) watchList(a k8stesting.Action) (bool, watch.Interface, error) {
	wa, ok := a.(k8stesting.WatchActionImpl)
	if !ok || wa.ListOptions.SendInitialEvents == nil || !*wa.ListOptions.SendInitialEvents {
		return false, nil, nil
	}
	gvr, ns := a.GetResource(), a.GetNamespace()
	kind, ok := map[string]string{"pods": "Pod", "configmaps": "ConfigMap", "secrets": "Secret"}[gvr.Resource]
	if !ok || gvr.Group != "" {
		return false, nil, nil
	}
	gvk := corev1.SchemeGroupVersion.WithKind(kind)
	// With list options, the tracker's watch starts with every object.
	w, err := h.client.Tracker().Watch(gvr, ns, metav1.ListOptions{})
	if err != nil {
		return true, nil, err
	}
	list, err := h.client.Tracker().List(gvr, gvk, ns)
	if err != nil {
		return true, nil, err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return true, nil, err
	}
	bookmark, err := scheme.Scheme.New(gvk)
	if err != nil {
		return true, nil, err
	}
	bm, err := meta.Accessor(bookmark)
	if err != nil {
		return true, nil, err
	}
	bm.SetResourceVersion(lm.GetResourceVersion())
	bm.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	fw, ok := w.(*watch.RaceFreeFakeWatcher)
	if !ok {
		return true, nil, fmt.Errorf("unexpected fake watcher %T", w)
	}
	fw.Action(watch.Bookmark, bookmark)
	return true, w, nil
}

// written returns every status the kubelet wrote for a pod, in order.
func (h *smHarness) written(name string) []corev1.PodStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.statuses[name])
}

// start runs the kubelet until the test ends.
func (h *smHarness) start() {
	h.t.Helper()
	k, err := kubelet.New(h.cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	h.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				h.t.Errorf("kubelet stopped with %v", err)
			}
		case <-time.After(smWait):
			h.t.Error("kubelet did not stop")
		}
	})
}

// smPod is a pod bound to the harness's node, as the hub stores it.
func smPod(name string, mod func(*corev1.Pod)) *corev1.Pod {
	grace := int64(30)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{
			NodeName: smNode, RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "app", Image: smImage}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	if mod != nil {
		mod(p)
	}
	return p
}

func (h *smHarness) create(p *corev1.Pod) *corev1.Pod {
	h.t.Helper()
	out, err := h.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

func (h *smHarness) get(name string) (*corev1.Pod, error) {
	return h.client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
}

// wait polls the pod on the hub until check passes.
func (h *smHarness) wait(name, what string, check func(*corev1.Pod) error) *corev1.Pod {
	h.t.Helper()
	deadline := time.Now().Add(smWait)
	for {
		p, err := h.get(name)
		if err == nil {
			if err = check(p); err == nil {
				return p
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("pod %s: %s: %v\n%s\nruntime: %s", name, what, err, smDump(p), h.history())
		}
		time.Sleep(smPoll)
	}
}

func (h *smHarness) eventually(what string, f func() error) {
	h.t.Helper()
	deadline := time.Now().Add(smWait)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: %v\nruntime: %s", what, err, h.history())
		}
		time.Sleep(smPoll)
	}
}

// consistently checks that f keeps passing for d (what must not happen
// can only be watched for a while).
func (h *smHarness) consistently(d time.Duration, what string, f func() error) {
	h.t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(smPoll) {
		if err := f(); err != nil {
			h.t.Fatalf("%s: %v\nruntime: %s", what, err, h.history())
		}
	}
}

// running waits until attempt of a pod's container runs, and returns it.
func (h *smHarness) running(uid types.UID, name string, attempt uint32) *runtime.Container {
	h.t.Helper()
	var out *runtime.Container
	h.eventually(fmt.Sprintf("%s attempt %d running", name, attempt), func() error {
		c, ok := h.rt.Latest(string(uid), name)
		if !ok {
			return errors.New("no container")
		}
		if c.Attempt != attempt || c.Status.State != runtime.StateRunning {
			return fmt.Errorf("latest attempt %d is %s", c.Attempt, c.Status.State)
		}
		out = c
		return nil
	})
	return out
}

func (h *smHarness) exit(c *runtime.Container, code int32) {
	h.t.Helper()
	if err := h.rt.Exit(c.ID, code); err != nil {
		h.t.Fatal(err)
	}
}

// names lists the container names of the pod's records (attempts
// included), sorted.
func (h *smHarness) names(uid types.UID) []string {
	var out []string
	for _, c := range h.rt.Containers(string(uid)) {
		out = append(out, c.Name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (h *smHarness) history() string {
	var b strings.Builder
	for _, r := range h.rt.History() {
		fmt.Fprintf(&b, "\n  %s %s %s#%d exit=%d grace=%s", r.At.Format("15:04:05.000"), r.Op, r.Name, r.Attempt, r.ExitCode, r.Grace)
	}
	return b.String()
}

func (h *smHarness) waitEvent(uid types.UID, reason, substr string) {
	h.t.Helper()
	h.eventually(fmt.Sprintf("a %s event with %q", reason, substr), func() error {
		list, err := h.client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		var seen []string
		for _, e := range list.Items {
			if e.InvolvedObject.UID != uid {
				continue
			}
			if e.Reason == reason && strings.Contains(e.Message, substr) {
				return nil
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return fmt.Errorf("events: %q", seen)
	})
}

func smDump(p *corev1.Pod) string {
	if p == nil {
		return "<no pod>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s ip=%s", p.Status.Phase, p.Status.PodIP)
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, " %s=%s", c.Type, c.Status)
	}
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		fmt.Fprintf(&b, "\n  %s ready=%v restarts=%d state=%s last=%s", cs.Name, cs.Ready, cs.RestartCount, smState(cs.State), smState(cs.LastTerminationState))
	}
	return b.String()
}

func smState(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Waiting != nil:
		return "waiting:" + s.Waiting.Reason
	case s.Terminated != nil:
		return fmt.Sprintf("terminated:%s:%d", s.Terminated.Reason, s.Terminated.ExitCode)
	}
	return "-"
}

func smStatus(st corev1.PodStatus, name string) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{st.ContainerStatuses, st.InitContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

func smCondition(p *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func phase(want corev1.PodPhase) func(*corev1.Pod) error {
	return func(p *corev1.Pod) error {
		if p.Status.Phase != want {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	}
}

// opNames lists the container names of the pod's History records of op.
func (h *smHarness) opNames(uid types.UID, op string) []string {
	var out []string
	for _, r := range h.rt.Ops(string(uid), op) {
		out = append(out, fmt.Sprintf("%s#%d", r.Name, r.Attempt))
	}
	return out
}

func TestStateMachineInitContainersRunInOrder(t *testing.T) {
	t.Parallel()
	h := newSMHarness(t)
	p := h.create(smPod("init", func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "first", Image: smImage}, {Name: "second", Image: smImage}}
	}))
	h.start()

	first := h.running(p.UID, "first", 0)
	h.wait("init", "initializing", func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodPending || smCondition(p, corev1.PodInitialized) != corev1.ConditionFalse {
			return errors.New("not Pending and uninitialized")
		}
		if cs := smStatus(p.Status, "app"); cs == nil || cs.State.Waiting == nil || cs.State.Waiting.Reason != "PodInitializing" {
			return errors.New("app not PodInitializing")
		}
		if cs := smStatus(p.Status, "first"); cs == nil || cs.State.Running == nil {
			return errors.New("first not running")
		}
		return nil
	})
	if got := h.names(p.UID); !slices.Equal(got, []string{"first"}) {
		t.Fatalf("containers while the first init container runs: %v", got)
	}
	// A failed init container is run again; the next one waits.
	h.exit(first, 1)
	first = h.running(p.UID, "first", 1)
	if got := h.names(p.UID); !slices.Equal(got, []string{"first"}) {
		t.Fatalf("containers after the first init container failed: %v", got)
	}
	h.exit(first, 0)
	second := h.running(p.UID, "second", 0)
	if got := h.names(p.UID); !slices.Equal(got, []string{"first", "second"}) {
		t.Fatalf("containers while the second init container runs: %v", got)
	}
	h.exit(second, 0)
	h.running(p.UID, "app", 0)

	if got := h.opNames(p.UID, "StartContainer"); !slices.Equal(got, []string{"first#0", "first#1", "second#0", "app#0"}) {
		t.Fatalf("start order = %v", got)
	}
	// Each started only after the one before it exited.
	var lastExit time.Time
	for _, r := range h.rt.Ops(string(p.UID), "StartContainer", "Exit") {
		switch r.Op {
		case "Exit":
			lastExit = r.At
		case "StartContainer":
			if r.At.Before(lastExit) {
				t.Fatalf("%s#%d started before the previous init container exited", r.Name, r.Attempt)
			}
		}
	}
	h.wait("init", "Running and initialized", func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodRunning || smCondition(p, corev1.PodInitialized) != corev1.ConditionTrue || smCondition(p, corev1.PodReady) != corev1.ConditionTrue {
			return errors.New("not Running, Initialized and Ready")
		}
		for _, name := range []string{"first", "second"} {
			cs := smStatus(p.Status, name)
			if cs == nil || cs.State.Terminated == nil || cs.State.Terminated.Reason != "Completed" {
				return fmt.Errorf("%s not Completed", name)
			}
		}
		if cs := smStatus(p.Status, "first"); cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 1 {
			return fmt.Errorf("first: restarts %d, last state %+v", cs.RestartCount, cs.LastTerminationState)
		}
		if cs := smStatus(p.Status, "app"); cs == nil || cs.State.Running == nil || !cs.Ready {
			return errors.New("app not running and ready")
		}
		if p.Status.HostIP != smHostIP || p.Status.PodIP == "" {
			return fmt.Errorf("hostIP %q podIP %q", p.Status.HostIP, p.Status.PodIP)
		}
		return nil
	})
	if a, ok := h.net.Attachment(string(p.UID)); !ok || a.NetNS == "" || h.net.Setups(string(p.UID)) != 1 {
		t.Fatalf("network: %+v attached=%v setups=%d", a, ok, h.net.Setups(string(p.UID)))
	}
}

func TestStateMachineCrashLoopBackOff(t *testing.T) {
	t.Parallel()
	h := newSMHarness(t)
	p := h.create(smPod("crasher", nil))
	h.start()

	const crashes = 4
	for attempt := uint32(0); attempt < crashes; attempt++ {
		h.exit(h.running(p.UID, "app", attempt), 2)
	}
	h.running(p.UID, "app", crashes)

	// The first restart is at once; then each waits the backoff, which
	// doubles.
	var exited time.Time
	for _, r := range h.rt.Ops(string(p.UID), "StartContainer", "Exit") {
		if r.Op == "Exit" {
			exited = r.At
			continue
		}
		if r.Attempt < 2 {
			continue
		}
		want := h.cfg.CrashLoopBackoff.Initial << (r.Attempt - 2)
		if gap := r.At.Sub(exited); gap < want-10*time.Millisecond {
			t.Errorf("attempt %d started %s after the last exit; the backoff is %s", r.Attempt, gap, want)
		}
	}
	// Between the restarts the container waited in CrashLoopBackOff,
	// not Ready, with the last exit in lastState.
	backoffs := map[int32]bool{}
	for _, st := range h.written("crasher") {
		cs := smStatus(st, "app")
		if cs == nil || cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" {
			continue
		}
		if !strings.Contains(cs.State.Waiting.Message, "restarting failed container=app pod=crasher_default") {
			t.Errorf("backoff message %q", cs.State.Waiting.Message)
		}
		if last := cs.LastTerminationState.Terminated; last == nil || last.ExitCode != 2 || last.Reason != "Error" {
			t.Errorf("lastState in backoff = %+v", cs.LastTerminationState)
		}
		if cs.Ready || st.Phase != corev1.PodRunning {
			t.Errorf("in backoff: ready=%v phase=%s", cs.Ready, st.Phase)
		}
		backoffs[cs.RestartCount] = true
	}
	for n := int32(1); n < crashes; n++ {
		if !backoffs[n] {
			t.Errorf("no CrashLoopBackOff status after restart %d (seen after %v)", n, backoffs)
		}
	}
	h.wait("crasher", "running attempt 4", func(p *corev1.Pod) error {
		cs := smStatus(p.Status, "app")
		if cs == nil || cs.State.Running == nil || cs.RestartCount != crashes {
			return errors.New("not running its fifth attempt")
		}
		if last := cs.LastTerminationState.Terminated; last == nil || last.ExitCode != 2 {
			return fmt.Errorf("lastState %+v", cs.LastTerminationState)
		}
		return nil
	})
	if n := h.rt.Restarts(string(p.UID), "app"); n != crashes {
		t.Fatalf("Restarts = %d", n)
	}
	// Only the last two attempts are kept.
	h.eventually("old attempts removed", func() error {
		var attempts []uint32
		for _, c := range h.rt.Containers(string(p.UID)) {
			attempts = append(attempts, c.Attempt)
		}
		if !slices.Equal(attempts, []uint32{crashes - 1, crashes}) {
			return fmt.Errorf("attempts kept: %v", attempts)
		}
		return nil
	})
	h.waitEvent(p.UID, "BackOff", "Back-off restarting failed container app in pod crasher_default")
}

func TestStateMachineRestartPolicyNever(t *testing.T) {
	t.Parallel()
	never := func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever }
	h := newSMHarness(t)
	fails := h.create(smPod("fails", never))
	succeeds := h.create(smPod("succeeds", never))
	initFails := h.create(smPod("init-fails", func(p *corev1.Pod) {
		never(p)
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: smImage}}
	}))
	h.start()

	h.exit(h.running(fails.UID, "app", 0), 1)
	h.exit(h.running(succeeds.UID, "app", 0), 0)
	h.exit(h.running(initFails.UID, "init", 0), 1)

	p := h.wait("fails", "Failed", phase(corev1.PodFailed))
	if cs := smStatus(p.Status, "app"); cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 1 || cs.State.Terminated.Reason != "Error" || cs.RestartCount != 0 {
		t.Fatalf("failed pod: %s", smDump(p))
	}
	p = h.wait("succeeds", "Succeeded", phase(corev1.PodSucceeded))
	if cs := smStatus(p.Status, "app"); cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 || cs.State.Terminated.Reason != "Completed" {
		t.Fatalf("succeeded pod: %s", smDump(p))
	}
	p = h.wait("init-fails", "Failed", phase(corev1.PodFailed))
	if cs := smStatus(p.Status, "app"); cs == nil || cs.State.Waiting == nil {
		t.Fatalf("the app of a pod whose init container failed: %s", smDump(p))
	}

	// A finished pod gives back its sandbox and network, keeps its
	// containers' records and its IP, and nothing starts again.
	for _, pod := range []*corev1.Pod{fails, succeeds, initFails} {
		uid := string(pod.UID)
		h.eventually(pod.Name+" released", func() error {
			if _, ok := h.rt.Sandbox(uid); ok {
				return errors.New("sandbox kept")
			}
			if _, ok := h.net.Attachment(uid); ok || h.net.Teardowns(uid) != 1 {
				return fmt.Errorf("network: teardowns %d", h.net.Teardowns(uid))
			}
			return nil
		})
		if len(h.rt.Containers(uid)) != 1 {
			t.Fatalf("%s: container records %d", pod.Name, len(h.rt.Containers(uid)))
		}
		if p, _ := h.get(pod.Name); p.Status.PodIP == "" {
			t.Fatalf("%s lost its IP: %s", pod.Name, smDump(p))
		}
	}
	h.consistently(3*h.cfg.ResyncInterval, "finished pods stay finished", func() error {
		for _, pod := range []*corev1.Pod{fails, succeeds, initFails} {
			uid := string(pod.UID)
			if n := len(h.rt.Ops(uid, "StartContainer")); n != 1 {
				return fmt.Errorf("%s: %d starts", pod.Name, n)
			}
			if n := len(h.rt.Ops(uid, "CreateSandbox")); n != 1 {
				return fmt.Errorf("%s: %d sandboxes made", pod.Name, n)
			}
			if n := h.net.Teardowns(uid); n != 1 {
				return fmt.Errorf("%s: %d network teardowns", pod.Name, n)
			}
			if p, _ := h.get(pod.Name); p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
				return fmt.Errorf("%s: phase %s", pod.Name, p.Status.Phase)
			}
		}
		return nil
	})
	if got := h.opNames(initFails.UID, "CreateContainer"); !slices.Equal(got, []string{"init#0"}) {
		t.Fatalf("containers made for a pod whose init container failed: %v", got)
	}
}

func TestStateMachineRestartPolicyOnFailure(t *testing.T) {
	t.Parallel()
	h := newSMHarness(t)
	p := h.create(smPod("batch", func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure }))
	h.start()

	h.exit(h.running(p.UID, "app", 0), 3)
	// A failure is restarted...
	h.exit(h.running(p.UID, "app", 1), 0)
	// ...a success is not.
	got := h.wait("batch", "Succeeded", phase(corev1.PodSucceeded))
	cs := smStatus(got.Status, "app")
	if cs.RestartCount != 1 || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 ||
		cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 3 {
		t.Fatalf("status: %s", smDump(got))
	}
	h.consistently(3*h.cfg.ResyncInterval, "no restart after success", func() error {
		if n := h.rt.Restarts(string(p.UID), "app"); n != 1 {
			return fmt.Errorf("%d restarts", n)
		}
		return nil
	})
}

// TestStateMachineProbeDial: with Config.Dial, httpGet and tcpSocket
// probes connect through it (to the pod's address), not from the
// machine's network.
func TestStateMachineProbeDial(t *testing.T) {
	t.Parallel()
	h := newSMHarness(t)
	var mu sync.Mutex
	dialed := map[string]int{}
	h.cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dialed[network+" "+addr]++
		mu.Unlock()
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			if req, err := http.ReadRequest(bufio.NewReader(server)); err == nil && req.URL.Path == "/healthz" {
				io.WriteString(server, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
			}
		}()
		return client, nil
	}
	probe := func(h corev1.ProbeHandler) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: h, PeriodSeconds: 1, FailureThreshold: 3, SuccessThreshold: 1, TimeoutSeconds: 1}
	}
	p := h.create(smPod("dialed", func(p *corev1.Pod) {
		c := &p.Spec.Containers[0]
		c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
		c.ReadinessProbe = probe(corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}})
		c.LivenessProbe = probe(corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9090)}})
	}))
	h.start()
	got := h.wait("dialed", "Ready through the dial seam", func(p *corev1.Pod) error {
		if smCondition(p, corev1.PodReady) != corev1.ConditionTrue {
			return errors.New("not Ready")
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"tcp " + got.Status.PodIP + ":8080", "tcp " + got.Status.PodIP + ":9090"} {
		if dialed[want] == 0 {
			t.Errorf("no dial of %s; dialed %v", want, dialed)
		}
	}
	if len(h.rt.Running(string(p.UID))) != 1 {
		t.Errorf("running containers: %v", h.rt.Running(string(p.UID)))
	}
}

func TestStateMachineSidecar(t *testing.T) {
	t.Parallel()
	h := newSMHarness(t)
	always := corev1.ContainerRestartPolicyAlways
	p := h.create(smPod("sidecar", func(p *corev1.Pod) {
		// The sidecar restarts whatever the pod's policy.
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		p.Spec.InitContainers = []corev1.Container{
			{Name: "proxy", Image: smImage, RestartPolicy: &always, StartupProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/ready"}}},
				PeriodSeconds: 1, FailureThreshold: 30, SuccessThreshold: 1, TimeoutSeconds: 1,
			}},
			{Name: "setup", Image: smImage},
		}
	}))
	var proxyReady atomic.Bool
	var probes atomic.Int32
	h.rt.SetExec(func(c runtime.Container, argv []string) (runtime.ExecResult, error) {
		if c.Name != "proxy" || !slices.Equal(argv, []string{"/ready"}) {
			return runtime.ExecResult{ExitCode: 2, Output: []byte("unexpected exec")}, nil
		}
		probes.Add(1)
		if !proxyReady.Load() {
			return runtime.ExecResult{ExitCode: 1, Output: []byte("not yet")}, nil
		}
		return runtime.ExecResult{}, nil
	})
	h.start()

	h.running(p.UID, "proxy", 0)
	h.eventually("the startup probe ran", func() error {
		if probes.Load() == 0 {
			return errors.New("no exec")
		}
		return nil
	})
	// Until its startup probe passes, nothing after the sidecar starts.
	if got := h.names(p.UID); !slices.Equal(got, []string{"proxy"}) {
		t.Fatalf("containers before the sidecar started: %v", got)
	}
	proxyReady.Store(true)
	setup := h.running(p.UID, "setup", 0)
	if got := h.names(p.UID); !slices.Equal(got, []string{"proxy", "setup"}) {
		t.Fatalf("containers while setup runs: %v", got)
	}
	h.exit(setup, 0)
	app := h.running(p.UID, "app", 0)
	if got := h.opNames(p.UID, "StartContainer"); !slices.Equal(got, []string{"proxy#0", "setup#0", "app#0"}) {
		t.Fatalf("start order = %v", got)
	}
	h.wait("sidecar", "Running and Ready", func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodRunning || smCondition(p, corev1.PodReady) != corev1.ConditionTrue {
			return errors.New("not Running and Ready")
		}
		if cs := smStatus(p.Status, "proxy"); cs == nil || cs.State.Running == nil || !cs.Ready || cs.Started == nil || !*cs.Started {
			return errors.New("sidecar not running, started and ready")
		}
		return nil
	})

	// The sidecar keeps running: it is restarted though the pod's policy
	// is Never, and the app is left alone.
	proxy, _ := h.rt.Latest(string(p.UID), "proxy")
	h.exit(proxy, 0)
	h.running(p.UID, "proxy", 1)
	if c, _ := h.rt.Latest(string(p.UID), "app"); c.ID != app.ID || c.Status.State != runtime.StateRunning {
		t.Fatalf("app after the sidecar restarted: %+v", c)
	}

	// When the app is done, the pod is, and the sidecar is stopped.
	h.exit(app, 0)
	h.wait("sidecar", "Succeeded", phase(corev1.PodSucceeded))
	h.eventually("sidecar stopped and sandbox removed", func() error {
		if r := h.rt.Running(string(p.UID)); len(r) != 0 {
			return fmt.Errorf("running: %v", r)
		}
		if _, ok := h.rt.Sandbox(string(p.UID)); ok {
			return errors.New("sandbox kept")
		}
		return nil
	})
	if got := h.opNames(p.UID, "StopContainer"); !slices.Equal(got, []string{"proxy#1"}) {
		t.Fatalf("stopped: %v", got)
	}
}

func TestStateMachineDeletion(t *testing.T) {
	t.Parallel()
	h := newSMHarness(t)
	always := corev1.ContainerRestartPolicyAlways
	p := h.create(smPod("doomed", func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: smImage, RestartPolicy: &always}}
	}))
	h.start()
	uid := string(p.UID)
	app := h.running(p.UID, "app", 0)
	proxy := h.running(p.UID, "proxy", 0)
	h.wait("doomed", "Running", phase(corev1.PodRunning))

	// The hub's graceful deletion: a deletionTimestamp and a grace
	// shorter than the spec's.
	cur, err := h.get("doomed")
	if err != nil {
		t.Fatal(err)
	}
	grace := int64(7)
	now := metav1.NewTime(time.Now().Add(time.Duration(grace) * time.Second))
	cur.DeletionTimestamp, cur.DeletionGracePeriodSeconds = &now, &grace
	if _, err := h.client.CoreV1().Pods("default").Update(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("the pod deleted from the hub", func() error {
		if _, err := h.get("doomed"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("get: %v", err)
		}
		return nil
	})
	// The kubelet finished the deletion: grace 0, for this pod's UID.
	var finished bool
	for _, a := range h.client.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && d.GetResource() == podsResource && d.GetName() == "doomed" {
			o := d.GetDeleteOptions()
			finished = o.GracePeriodSeconds != nil && *o.GracePeriodSeconds == 0 && o.Preconditions != nil && o.Preconditions.UID != nil && *o.Preconditions.UID == p.UID
		}
	}
	if !finished {
		t.Fatal("the kubelet did not delete the pod with grace 0 and a UID precondition")
	}

	// The app went first, then the sidecar, each with the deletion's
	// grace period.
	if got := h.opNames(p.UID, "StopContainer"); !slices.Equal(got, []string{"app#0", "proxy#0"}) {
		t.Fatalf("stop order = %v", got)
	}
	for _, c := range []*runtime.Container{app, proxy} {
		g := h.rt.StopGraces(c.ID)
		if len(g) != 1 || g[0] > 7*time.Second || g[0] < 6*time.Second {
			t.Fatalf("%s stopped with grace %v, want 7s", c.Name, g)
		}
	}
	// Everything is released, once.
	if cs := h.rt.Containers(uid); len(cs) != 0 {
		t.Fatalf("containers left: %d", len(cs))
	}
	if _, ok := h.rt.Sandbox(uid); ok {
		t.Fatal("sandbox left")
	}
	if _, ok := h.net.Attachment(uid); ok {
		t.Fatal("network attachment left")
	}
	if !slices.ContainsFunc(h.rt.RemovedLogs(), func(r runtime.PodRef) bool { return r.UID == uid }) {
		t.Fatal("logs not removed")
	}
	h.consistently(3*h.cfg.ResyncInterval, "a deleted pod stays gone", func() error {
		if n := h.net.Teardowns(uid); n != 1 {
			return fmt.Errorf("network torn down %d times", n)
		}
		if n := h.net.Setups(uid); n != 1 {
			return fmt.Errorf("network set up %d times", n)
		}
		if n := len(h.rt.Ops(uid, "CreateSandbox")); n != 1 {
			return fmt.Errorf("%d sandboxes made", n)
		}
		if n := len(h.rt.Ops(uid, "RemoveSandbox")); n != 1 {
			return fmt.Errorf("%d sandboxes removed", n)
		}
		return nil
	})
}

func TestStateMachineImagePullBackOff(t *testing.T) {
	t.Parallel()
	const image = "registry.example.com/missing:1"
	h := newSMHarness(t)
	h.images.SetPullError(image, fmt.Errorf("%w: %s: 404 Not Found", registry.ErrImageNotFound, image))
	p := h.create(smPod("no-image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = image }))
	h.start()

	h.eventually("ErrImagePull, then ImagePullBackOff", func() error {
		var reasons []string
		for _, st := range h.written("no-image") {
			if cs := smStatus(st, "app"); cs != nil && cs.State.Waiting != nil {
				reasons = append(reasons, cs.State.Waiting.Reason)
				if cs.State.Waiting.Reason == "ErrImagePull" && !strings.Contains(cs.State.Waiting.Message, "image not found in the registry") {
					return fmt.Errorf("ErrImagePull message %q", cs.State.Waiting.Message)
				}
				if cs.State.Waiting.Reason == "ImagePullBackOff" && cs.State.Waiting.Message != `Back-off pulling image "`+image+`"` {
					return fmt.Errorf("ImagePullBackOff message %q", cs.State.Waiting.Message)
				}
			}
		}
		pull := slices.Index(reasons, "ErrImagePull")
		backoff := slices.Index(reasons, "ImagePullBackOff")
		if pull < 0 || backoff < pull {
			return fmt.Errorf("waiting reasons written: %v", reasons)
		}
		return nil
	})
	if got, _ := h.get("no-image"); got.Status.Phase != corev1.PodPending {
		t.Fatalf("phase %s", got.Status.Phase)
	}
	if n := len(h.rt.Ops(string(p.UID), "CreateContainer")); n != 0 {
		t.Fatalf("%d containers made without their image", n)
	}
	h.waitEvent(p.UID, "Failed", `Failed to pull image "`+image+`"`)
	h.waitEvent(p.UID, "BackOff", `Back-off pulling image "`+image+`"`)

	// Once the registry has it, the pull is retried and the pod runs.
	pulls := h.images.Pulls(image)
	h.images.SetPullError(image, nil)
	h.running(p.UID, "app", 0)
	got := h.wait("no-image", "Running", phase(corev1.PodRunning))
	cs := smStatus(got.Status, "app")
	if cs.State.Running == nil || !strings.HasPrefix(cs.ImageID, "registry.example.com/missing@sha256:") {
		t.Fatalf("status: %s imageID %q", smDump(got), cs.ImageID)
	}
	after := h.images.Pulls(image)
	if after <= pulls || !h.images.Has(image) {
		t.Fatalf("pulls %d -> %d, present %v", pulls, after, h.images.Has(image))
	}
	h.consistently(2*h.cfg.ResyncInterval, "a present image is not pulled again", func() error {
		if n := h.images.Pulls(image); n != after {
			return fmt.Errorf("pulls %d -> %d", after, n)
		}
		return nil
	})
}

func TestStateMachineOrphans(t *testing.T) {
	t.Parallel()
	keeper := smPod("keeper", nil)
	h := newSMHarness(t, keeper)
	// Left by an earlier agent: a pod deleted while it was down, and one
	// that is still wanted.
	orphan := runtime.PodRef{UID: "uid-orphan", Namespace: "default", Name: "gone"}
	h.rt.AddSandbox(orphan, "10.88.0.50")
	if err := h.net.Attach(orphan.UID, net.ParseIP("10.88.0.50")); err != nil {
		t.Fatal(err)
	}
	orphanID := h.rt.AddContainer(runtime.Container{Pod: orphan, Name: "app", Image: smImage})
	kept := runtime.PodRef{UID: string(keeper.UID), Namespace: keeper.Namespace, Name: keeper.Name}
	h.rt.AddSandbox(kept, "10.88.0.51")
	if err := h.net.Attach(kept.UID, net.ParseIP("10.88.0.51")); err != nil {
		t.Fatal(err)
	}
	keptID := h.rt.AddContainer(runtime.Container{Pod: kept, Name: "app", Image: smImage})
	h.start()

	h.eventually("the orphan removed", func() error {
		if cs := h.rt.Containers(orphan.UID); len(cs) != 0 {
			return fmt.Errorf("%d containers left", len(cs))
		}
		if _, ok := h.rt.Sandbox(orphan.UID); ok {
			return errors.New("sandbox left")
		}
		if _, ok := h.net.Attachment(orphan.UID); ok {
			return errors.New("still attached")
		}
		// Logs go last, a step after the rest.
		if !slices.ContainsFunc(h.rt.RemovedLogs(), func(r runtime.PodRef) bool { return r.UID == orphan.UID }) {
			return errors.New("logs not removed")
		}
		return nil
	})
	if g := h.rt.StopGraces(orphanID); len(g) != 1 || g[0] > h.cfg.OrphanGracePeriod || g[0] < h.cfg.OrphanGracePeriod-100*time.Millisecond {
		t.Fatalf("orphan stopped with grace %v, want %v", g, h.cfg.OrphanGracePeriod)
	}
	if n := h.net.Teardowns(orphan.UID); n != 1 {
		t.Fatalf("orphan's network torn down %d times", n)
	}

	// The wanted pod is adopted as it runs.
	got := h.wait("keeper", "Running with the adopted container", func(p *corev1.Pod) error {
		cs := smStatus(p.Status, "app")
		if p.Status.Phase != corev1.PodRunning || cs == nil || cs.State.Running == nil || cs.ContainerID != "containerd://"+keptID {
			return errors.New("not running the adopted container")
		}
		return nil
	})
	if got.Status.PodIP != "10.88.0.51" || smStatus(got.Status, "app").RestartCount != 0 {
		t.Fatalf("adopted pod: %s", smDump(got))
	}
	if ops := h.rt.Ops(kept.UID, "CreateSandbox", "CreateContainer", "StartContainer", "StopContainer", "RemoveContainer", "RemoveSandbox"); len(ops) != 0 {
		t.Fatalf("adopting changed the pod: %+v", ops)
	}
	if h.net.Setups(kept.UID) != 0 || h.net.Teardowns(kept.UID) != 0 {
		t.Fatal("adopting touched the pod's network")
	}
}

// TestContainerExitBeforeHubSyncKeepsPod: an agent restarts while the
// hub is away; a container of a pod it ran exits before the hub source
// has synced. Nobody has said the pod is unwanted, so the kubelet must
// not remove it.
func TestContainerExitBeforeHubSyncKeepsPod(t *testing.T) {
	t.Parallel()
	h := newSMHarness(t)
	var lists atomic.Int32
	h.client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		lists.Add(1)
		return true, nil, errors.New("hub unreachable")
	})
	h.client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, nil, errors.New("hub unreachable")
	})
	pod := runtime.PodRef{UID: "uid-survivor", Namespace: "default", Name: "survivor"}
	h.rt.AddSandbox(pod, "10.88.0.60")
	if err := h.net.Attach(pod.UID, net.ParseIP("10.88.0.60")); err != nil {
		t.Fatal(err)
	}
	id := h.rt.AddContainer(runtime.Container{Pod: pod, Name: "app", Image: smImage})
	h.start()

	h.eventually("the kubelet watches the runtime and tries the hub", func() error {
		if h.rt.Watchers() == 0 || lists.Load() == 0 {
			return fmt.Errorf("watchers %d, pod lists %d", h.rt.Watchers(), lists.Load())
		}
		return nil
	})
	if err := h.rt.Exit(id, 1); err != nil {
		t.Fatal(err)
	}
	h.consistently(2*time.Second, "the pod is kept while the hub has not synced", func() error {
		if _, ok := h.rt.Sandbox(pod.UID); !ok {
			return errors.New("sandbox removed")
		}
		if _, err := h.rt.ContainerStatus(context.Background(), id); err != nil {
			return fmt.Errorf("container: %w", err)
		}
		for _, op := range []string{"RemoveContainer", "RemoveSandbox"} {
			if n := h.rt.Calls(op); n != 0 {
				return fmt.Errorf("%d %s calls", n, op)
			}
		}
		if n := h.net.Calls("Teardown"); n != 0 {
			return fmt.Errorf("%d network teardowns", n)
		}
		return nil
	})
}

// TestStateMachineFakes checks the fakes behave as the real runtime,
// network and puller do where the kubelet relies on it.
func TestStateMachineFakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt := kubelettest.NewRuntime()
	if _, err := rt.GetSandbox(ctx, "nope"); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("GetSandbox of an unknown sandbox: %v", err)
	}
	if _, err := rt.ContainerStatus(ctx, "nope"); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("ContainerStatus of an unknown container: %v", err)
	}
	pod := runtime.PodRef{UID: "u1", Namespace: "ns", Name: "p"}
	injected := errors.New("injected")
	rt.FailNext("CreateSandbox", injected)
	if _, err := rt.CreateSandbox(ctx, runtime.SandboxConfig{Pod: pod}); !errors.Is(err, injected) {
		t.Fatalf("FailNext: %v", err)
	}
	sb, err := rt.CreateSandbox(ctx, runtime.SandboxConfig{Pod: pod})
	if err != nil || sb.ID != "u1" || !sb.Ready() || rt.Calls("CreateSandbox") != 2 {
		t.Fatalf("CreateSandbox = %+v, %v (ready %v, calls %d)", sb, err, sb != nil && sb.Ready(), rt.Calls("CreateSandbox"))
	}
	if err := rt.SetSandboxReady("u1", false); err != nil {
		t.Fatal(err)
	}
	if sb, _ := rt.GetSandbox(ctx, "u1"); sb.Ready() {
		t.Fatal("a sandbox that lost its namespaces is Ready")
	}

	var mu sync.Mutex
	var events []runtime.Event
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go rt.Watch(wctx, func(ev runtime.Event) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	})
	for rt.Watchers() == 0 {
		time.Sleep(time.Millisecond)
	}
	for _, c := range []struct {
		name    string
		attempt uint32
	}{{"b", 1}, {"b", 0}, {"a", 0}} {
		if _, err := rt.CreateContainer(ctx, runtime.ContainerConfig{Pod: pod, Name: c.name, Attempt: c.attempt, Image: "app:1", Sandbox: sb, Labels: map[string]string{"k": "v"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rt.CreateContainer(ctx, runtime.ContainerConfig{Pod: pod, Name: "a", Image: "app:1", Sandbox: sb}); !errors.Is(err, runtime.ErrAlreadyExists) {
		t.Fatalf("creating a container twice: %v", err)
	}
	cs, _ := rt.ListContainers(ctx, runtime.ListFilter{PodUID: "u1"})
	var order []string
	for _, c := range cs {
		order = append(order, fmt.Sprintf("%s#%d", c.Name, c.Attempt))
		if c.ID != runtime.ContainerID("u1", c.Name, c.Attempt) || c.Labels["k"] != "v" || c.Labels[runtime.LabelPodUID] != "u1" || c.Status.State != runtime.StateCreated {
			t.Fatalf("container %+v", c)
		}
	}
	if !slices.Equal(order, []string{"a#0", "b#0", "b#1"}) {
		t.Fatalf("ListContainers order %v", order)
	}
	if cs, _ := rt.ListContainers(ctx, runtime.ListFilter{PodUID: "other"}); len(cs) != 0 {
		t.Fatal("ListFilter ignored")
	}
	a := runtime.ContainerID("u1", "a", 0)
	if err := rt.StartContainer(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := rt.Exit(a, 3); err != nil {
		t.Fatal(err)
	}
	c, _ := rt.ContainerStatus(ctx, a)
	if st := c.Status; st.State != runtime.StateExited || st.ExitCode != 3 || st.Reason != "Error" || st.StartedAt.IsZero() || st.FinishedAt.Before(st.StartedAt) {
		t.Fatalf("after Exit: %+v", st)
	}
	b := runtime.ContainerID("u1", "b", 1)
	rt.StartContainer(ctx, b)
	if st, err := rt.StopContainer(ctx, b, 3*time.Second); err != nil || st.State != runtime.StateExited || st.ExitCode != kubelettest.DefaultStopExitCode {
		t.Fatalf("StopContainer = %+v, %v", st, err)
	}
	if g := rt.StopGraces(b); !slices.Equal(g, []time.Duration{3 * time.Second}) {
		t.Fatalf("graces %v", g)
	}
	deadline := time.Now().Add(smWait)
	for {
		mu.Lock()
		n := len(events)
		got := slices.Clone(events)
		mu.Unlock()
		if n == 4 {
			want := []runtime.EventType{runtime.EventStart, runtime.EventExit, runtime.EventStart, runtime.EventExit}
			for i, ev := range got {
				if ev.Type != want[i] {
					t.Fatalf("events %+v", got)
				}
			}
			if got[1].ContainerID != a || got[1].ExitCode != 3 {
				t.Fatalf("exit event %+v", got[1])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events %+v", got)
		}
		time.Sleep(time.Millisecond)
	}

	n := kubelettest.NewNetwork()
	ip1, _ := n.Setup(ctx, "p1", "/ns/1", cni.Attach{})
	ip2, _ := n.Setup(ctx, "p2", "/ns/2", cni.Attach{})
	if ip1.String() != "10.88.0.2" || ip2.String() != "10.88.0.3" {
		t.Fatalf("IPs %s %s", ip1, ip2)
	}
	n.Teardown(ctx, "p1", "/ns/1")
	if ip3, _ := n.Setup(ctx, "p3", "/ns/3", cni.Attach{}); !ip3.Equal(ip1) || n.Calls("Setup") != 3 || n.Teardowns("p1") != 1 {
		t.Fatalf("freed address not reused: %s", ip3)
	}

	im := kubelettest.NewImages("app:1")
	ref, _ := registry.ParseReference("docker.io/library/app:1")
	if p, ok, _ := im.Present(ctx, ref); !ok || p.Name() != "docker.io/library/app:1" || p.Digest == "" {
		t.Fatalf("Present = %+v, %v", p, ok)
	}
	im.SetPullError("example.com/x:2", fmt.Errorf("%w: x", registry.ErrImageNotFound))
	if _, err := im.Pull(ctx, "example.com/x:2"); !errors.Is(err, registry.ErrImageNotFound) {
		t.Fatalf("Pull with an injected error: %v", err)
	}
	pinned := "example.com/y@sha256:" + strings.Repeat("ab", 32)
	if p, err := im.Pull(ctx, pinned); err != nil || p.Name() != pinned || p.Digest.Encoded() != strings.Repeat("ab", 32) || !p.Fetched || !im.Has(pinned) {
		t.Fatalf("Pull = %+v, %v", p, err)
	}
}

// TestStateMachineImageSignature: an image whose signature does not
// verify never starts (nothing created from it), waits with the reason
// flotctl's Diagnosis reads, and runs once it verifies; a present image
// is verified again before its container starts.
func TestStateMachineImageSignature(t *testing.T) {
	t.Parallel()
	const image = "registry.example.com/unsigned@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	h := newSMHarness(t)
	refused := &trust.SignatureError{Image: "registry.example.com/unsigned", Reason: trust.ErrNoSignature, Detail: "push a signature made with a trusted key"}
	h.images.SetUntrusted(image, refused)
	p := h.create(smPod("unsigned", func(p *corev1.Pod) { p.Spec.Containers[0].Image = image }))
	h.start()

	h.eventually("waiting with ErrImageSignature", func() error {
		for _, st := range h.written("unsigned") {
			if cs := smStatus(st, "app"); cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == "ErrImageSignature" {
				if !strings.Contains(cs.State.Waiting.Message, "no signature") {
					return fmt.Errorf("message %q does not say why", cs.State.Waiting.Message)
				}
				return nil
			}
		}
		return errors.New("no ErrImageSignature written")
	})
	h.waitEvent(p.UID, "Failed", `Failed to verify image "`+image+`"`)
	if n := len(h.rt.Ops(string(p.UID), "CreateContainer")); n != 0 || h.images.Has(image) {
		t.Fatalf("%d containers made, image present %v: a refused image must leave nothing", n, h.images.Has(image))
	}

	h.images.SetUntrusted(image, nil)
	h.running(p.UID, "app", 0)

	// Present but no longer trusted (the keys changed): the next start
	// of the container is refused.
	h.images.SetUntrusted(image, refused)
	h.rt.Exit(runtime.ContainerID(string(p.UID), "app", 0), 1)
	h.eventually("the restart refused", func() error {
		got, _ := h.get("unsigned")
		if cs := smStatus(got.Status, "app"); cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == "ErrImageSignature" {
			return nil
		}
		return errors.New("not refused")
	})
	if n := len(h.rt.Ops(string(p.UID), "CreateContainer")); n != 1 {
		t.Fatalf("%d containers made, want only the first", n)
	}
}

// A pod's image pull secrets reach the pull, the first secret naming a
// registry winning; one that is missing or of another type is reported
// and the pull is tried anyway.
func TestStateMachineImagePullSecrets(t *testing.T) {
	t.Parallel()
	const image = "registry.example.com/private:1"
	secret := func(name string, typ corev1.SecretType, data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Type: typ, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	h := newSMHarness(t)
	for _, s := range []*corev1.Secret{
		secret("team", corev1.SecretTypeDockerConfigJson, map[string]string{corev1.DockerConfigJsonKey: `{"auths":{"registry.example.com":{"username":"team","password":"t"}}}`}),
		secret("fleet", corev1.SecretTypeDockercfg, map[string]string{corev1.DockerConfigKey: `{"registry.example.com":{"username":"fleet","password":"f"},"mirror.local":{"username":"m","password":"m"}}`}),
		secret("opaque", corev1.SecretTypeOpaque, map[string]string{"password": "x"}),
	} {
		if _, err := h.client.CoreV1().Secrets("default").Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	p := h.create(smPod("private", func(p *corev1.Pod) {
		p.Spec.Containers[0].Image = image
		p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "team"}, {Name: "missing"}, {Name: "opaque"}, {Name: "fleet"}}
	}))
	h.start()
	h.running(p.UID, "app", 0)
	keys := h.images.Keychain(image)
	if a, ok := keys.Lookup("registry.example.com"); !ok || a.Username != "team" {
		t.Errorf("registry.example.com credentials %+v %v, want the first secret's", a, ok)
	}
	if a, ok := keys.Lookup("mirror.local"); !ok || a.Username != "m" {
		t.Errorf("mirror.local credentials %+v %v, want the fleet secret's", a, ok)
	}
	h.waitEvent(p.UID, "FailedToRetrieveImagePullSecret", "missing")
	h.waitEvent(p.UID, "FailedToRetrieveImagePullSecret", `opaque: type "Opaque" is not kubernetes.io/dockerconfigjson`)
}

// A pod whose DaemonSet announces its next revision's images has them
// pulled and verified while it keeps running, and says so in a
// condition: True with the announcement as message, False with why.
func TestStateMachinePrepull(t *testing.T) {
	t.Parallel()
	const next = "registry.example.com/app:2"
	const unsigned = "registry.example.com/unsigned@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	h := newSMHarness(t)
	h.images.SetUntrusted(unsigned, &trust.SignatureError{Image: "registry.example.com/unsigned", Reason: trust.ErrNoSignature})
	p := h.create(smPod("daemon", nil))
	h.start()
	h.running(p.UID, "app", 0)

	announce := func(images string) {
		t.Helper()
		got, err := h.get("daemon")
		if err != nil {
			t.Fatal(err)
		}
		got.Annotations = map[string]string{api.AnnotationPrepullImages: images}
		if _, err := h.client.CoreV1().Pods("default").Update(context.Background(), got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	condition := func(status corev1.ConditionStatus, reason, msg string) func(*corev1.Pod) error {
		return func(p *corev1.Pod) error {
			for _, c := range p.Status.Conditions {
				if c.Type == api.ConditionImagesPrepulled {
					if c.Status != status || c.Reason != reason || !strings.Contains(c.Message, msg) {
						return fmt.Errorf("condition %s %s %q", c.Status, c.Reason, c.Message)
					}
					return nil
				}
			}
			return errors.New("no prepull condition")
		}
	}

	announce(smImage + "," + next)
	h.wait("daemon", "prepulled", condition(corev1.ConditionTrue, "Pulled", smImage+","+next))
	if !h.images.Has(next) || h.images.Pulls(next) != 1 || h.images.Pulls(smImage) != 0 {
		t.Fatalf("present %v, pulls of the next image %d, of the present one %d", h.images.Has(next), h.images.Pulls(next), h.images.Pulls(smImage))
	}
	h.waitEvent(p.UID, "Prepulled", next)

	// A new announcement whose image does not verify: False, with why,
	// and the running container is left alone.
	announce(unsigned)
	got := h.wait("daemon", "refused", condition(corev1.ConditionFalse, "ErrImageSignature", "no signature"))
	if got.Status.Phase != corev1.PodRunning || h.images.Has(unsigned) {
		t.Fatalf("phase %s, refused image present %v", got.Status.Phase, h.images.Has(unsigned))
	}
	if n := len(h.rt.Ops(string(p.UID), "CreateContainer")); n != 1 {
		t.Fatalf("%d containers made; prepulling must not touch the running one", n)
	}
	h.waitEvent(p.UID, "FailedPrepull", unsigned)

	// Signed later: the retry (with the image pull backoff) succeeds.
	h.images.SetUntrusted(unsigned, nil)
	h.wait("daemon", "prepulled after the retry", condition(corev1.ConditionTrue, "Pulled", unsigned))

	// The announcement withdrawn: the condition goes.
	announce("")
	h.wait("daemon", "condition gone", func(p *corev1.Pod) error {
		if condition(corev1.ConditionTrue, "", "")(p).Error() == "no prepull condition" {
			return nil
		}
		return errors.New("condition still there")
	})
}
