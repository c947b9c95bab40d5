package diagnose

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/v1alpha1"
)

var now = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func before(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }
func ptr[T any](v T) *T                  { return &v }

const image = "registry.shop.local:5000/web@sha256:4f1c0ffee"

func readyNode(name string) corev1.Node {
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "AgentReady", LastHeartbeatTime: before(5 * time.Second)}}}}
}

func lostNode(name string, lastSeen time.Duration) corev1.Node {
	n := readyNode(name)
	n.Status.Conditions[0] = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
		Message: "Agent stopped posting node status.", LastHeartbeatTime: before(lastSeen), LastTransitionTime: before(lastSeen - 40*time.Second)}
	return n
}

func facts() *Facts {
	return &Facts{Now: now, Nodes: []corev1.Node{readyNode("edge-1"), lostNode("kiosk-7", 12*time.Minute)},
		Leases: []coordinationv1.Lease{{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-node-lease", Name: "kiosk-7"},
			Spec: coordinationv1.LeaseSpec{RenewTime: ptr(metav1.NewMicroTime(now.Add(-11 * time.Minute)))}}}}
}

// pod builds a pod as the scheduler and the agent leave it.
func pod(name, node string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", CreationTimestamp: before(10 * time.Minute), Labels: map[string]string{"app": "web"}},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "web", Image: image}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
	if node != "" {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	}
	return p
}

func event(obj, reason, typ, msg, source string, when time.Duration) corev1.Event {
	return corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: obj + "." + reason},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: obj},
		Reason:         reason, Type: typ, Message: msg, Source: corev1.EventSource{Component: source},
		LastTimestamp: before(when), Count: 3}
}

func expect(t *testing.T, f Finding, sev Severity, stage, owner string, mention ...string) {
	t.Helper()
	text := f.Summary + "\n" + strings.Join(f.Details, "\n")
	if f.Severity != sev || f.Stage != stage || !strings.Contains(f.Owner, owner) {
		t.Errorf("finding %s/%s owner %q, want %s/%s owner containing %q\n%s", f.Severity, f.Stage, f.Owner, sev, stage, owner, text)
	}
	for _, m := range mention {
		if !strings.Contains(text, m) {
			t.Errorf("finding does not mention %q:\n%s", m, text)
		}
	}
}

func TestUnscheduledNamesTheSchedulerAndItsReasons(t *testing.T) {
	p := pod("web-1", "")
	msg := "0/3 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 1 node(s) were unschedulable."
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: msg}}
	p.Spec.NodeSelector = map[string]string{"kubernetes.io/arch": "riscv64"}
	f := facts()
	f.Events = []corev1.Event{event("web-1", "FailedScheduling", "Warning", msg, "flotilla-scheduler", 20*time.Second)}
	expect(t, Pod(p, f), Warning, StageScheduling, "the scheduler", "node affinity/selector", "seen 3 times", "kubernetes.io/arch=riscv64")

	// No attempt at all: the scheduler itself is suspect.
	expect(t, Pod(pod("web-2", ""), facts()), Warning, StageScheduling, "the scheduler", "is the scheduler running?")
}

func TestScheduledNotStartedNamesTheAgentAndItsLastEvent(t *testing.T) {
	p := pod("web-1", "edge-1")
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "web", Image: image, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
	f := facts()
	f.Events = []corev1.Event{
		event("web-1", "Scheduled", "Normal", "Successfully assigned shop/web-1 to edge-1", "flotilla-scheduler", time.Minute),
		event("web-1", "Pulling", "Normal", "Pulling image "+image, "flotilla-agent", 50*time.Second),
	}
	expect(t, Pod(p, f), Warning, StageStarting, "the agent on device edge-1", "Pulling image", "ContainerCreating")

	// Nothing heard from the agent.
	f.Events = f.Events[:1]
	expect(t, Pod(pod("web-2", "edge-1"), f), Warning, StageStarting, "edge-1", "is flotilla-agent running on edge-1?")
}

func TestImagePullNamesTheRegistryImageAndDigest(t *testing.T) {
	p := pod("web-1", "edge-1")
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "web", Image: image, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason: "ImagePullBackOff", Message: "Back-off pulling image: dial tcp 10.0.0.5:5000: connect: connection refused"}}}}
	expect(t, Pod(p, facts()), Critical, StageImage, "registry.shop.local:5000", image, "digest: sha256:4f1c0ffee", "connection refused")
}

func TestSignatureFailureNamesTheSignatureCheck(t *testing.T) {
	p := pod("web-1", "edge-1")
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "web", Image: image, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason: "ErrImageSignature", Message: "no signature of " + image + " verifies against /etc/flotilla/trust"}}}}
	expect(t, Pod(p, facts()), Critical, StageSignature, "signature check", "sha256:4f1c0ffee", "/etc/flotilla/trust")

	p.Spec.Containers[0].Image = "registry.shop.local:5000/web:latest"
	p.Status.ContainerStatuses[0].State.Waiting = &corev1.ContainerStateWaiting{Reason: "ErrImagePolicy", Message: "image is not pinned by digest"}
	expect(t, Pod(p, facts()), Critical, StagePolicy, "image policy", "not pinned by digest")
}

func TestCrashLoopNamesTheApplicationExitCodeAndLogs(t *testing.T) {
	p := pod("web-1", "edge-1")
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "web", Image: image, RestartCount: 6,
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 2m40s restarting failed container"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error", FinishedAt: before(30 * time.Second)}}}}
	f := facts()
	f.PreviousLogs = map[string][]string{LogKey("shop", "web-1", "web"): {"loading config", "panic: DATABASE_URL is not set"}}
	expect(t, Pod(p, f), Critical, StageRunning, "the application (container web)", "exit code 3", "restarted 6 times", "panic: DATABASE_URL is not set", "30s ago")

	// OOMKilled says what the limit was.
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
	p.Status.ContainerStatuses[0].LastTerminationState.Terminated.Reason = "OOMKilled"
	p.Status.ContainerStatuses[0].LastTerminationState.Terminated.ExitCode = 137
	expect(t, Pod(p, facts()), Critical, StageRunning, "application", "exit code 137 (OOMKilled)", "limit of 64Mi")
}

func TestRunningNotReadyNamesTheReadinessProbe(t *testing.T) {
	p := pod("web-1", "edge-1")
	p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready"}}}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse})
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "web", Image: image, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	f := facts()
	f.Events = []corev1.Event{event("web-1", "Unhealthy", "Warning", "Readiness probe failed: HTTP probe failed with statuscode: 503", "flotilla-agent", 4*time.Second)}
	expect(t, Pod(p, f), Warning, StageReadiness, "readiness probe of container web", "statuscode: 503")

	// Ready once the condition says so.
	p.Status.Conditions[1].Status = corev1.ConditionTrue
	p.Status.ContainerStatuses[0].Ready = true
	if fd := Pod(p, f); !fd.Healthy() || fd.Stage != StageDone {
		t.Errorf("ready pod diagnosed %+v", fd)
	}
}

func TestPodOnLostDeviceNamesTheDevice(t *testing.T) {
	p := pod("kiosk-ui", "kiosk-7")
	p.Status.Phase = corev1.PodRunning
	expect(t, Pod(p, facts()), Critical, StageDevice, "kiosk-7", "NotReady, last seen 11m ago")

	// A pod being deleted from a lost device waits for the device.
	p.DeletionTimestamp = ptr(before(5 * time.Minute))
	expect(t, Pod(p, facts()), Warning, StageDeletion, "kiosk-7", "must confirm")
}

func TestNodeNotReadyNamesLastSeen(t *testing.T) {
	f := facts()
	f.Pods = []corev1.Pod{*pod("a", "kiosk-7"), *pod("b", "kiosk-7"), *pod("c", "edge-1")}
	n := f.Nodes[1]
	expect(t, Node(&n, f), Critical, StageDevice, "the agent on device kiosk-7", "last seen 11m ago", "2 pods bound", "Agent stopped posting")

	ok := f.Nodes[0]
	if fd := Node(&ok, f); !fd.Healthy() || !strings.Contains(fd.Summary, "5s ago") {
		t.Errorf("ready node: %+v", fd)
	}
	ok.Spec.Unschedulable = true
	expect(t, Node(&ok, f), Info, StageDevice, "cordoned", "cordoned")
}

func TestServiceWithoutEndpointsCountsPods(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}}}
	// Selector matches nothing.
	expect(t, Service(svc, facts()), Warning, StageEndpoints, "selector", "matches 0 pods, 0 ready")

	// Two pods match, neither ready: the worst pod says why.
	f := facts()
	crash := pod("web-1", "edge-1")
	crash.Status.Phase = corev1.PodRunning
	crash.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "web", RestartCount: 2, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}
	f.Pods = []corev1.Pod{*crash, *pod("web-2", "edge-1")}
	expect(t, Service(svc, f), Warning, StageEndpoints, "application", "matches 2 pods, 0 ready", "exit code 1")

	// With a ready endpoint it is healthy.
	f.EndpointSlices = []discoveryv1.EndpointSlice{{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-x", Labels: map[string]string{"kubernetes.io/service-name": "web"}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.42.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}},
			{Addresses: []string{"10.42.1.6"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(false)}}}}}
	if fd := Service(svc, f); !fd.Healthy() || !strings.Contains(fd.Summary, "1 ready endpoints of 2") {
		t.Errorf("service with endpoint: %+v", fd)
	}
}

func TestGitSourceNotReadyNamesCommitFileAndError(t *testing.T) {
	g := &v1alpha1.GitSource{ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: "flotilla-system"},
		Spec: v1alpha1.GitSourceSpec{URL: "file:///srv/git/fleet.git"},
		Status: v1alpha1.GitSourceStatus{LastAppliedCommit: "1111111aaaa", LastAttemptedCommit: "2222222bbbb",
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "ValidationFailed",
				Message: `apps/web.yaml: Deployment "web" is invalid: spec.template.spec.containers[0].image: Required value`}}}}
	expect(t, GitSource(g, facts()), Critical, StageSource, "file:///srv/git/fleet.git",
		"commit 2222222", "commit: 2222222bbbb", "file: apps/web.yaml", "Required value", "still applied: commit 1111111")

	g.Status.Conditions[0].Status = metav1.ConditionTrue
	if fd := GitSource(g, facts()); !fd.Healthy() {
		t.Errorf("ready source: %+v", fd)
	}
}

func TestDeploymentStuckNamesTheWorstPod(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Generation: 2},
		Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 1,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded",
				Message: `ReplicaSet "web-abc" has timed out progressing.`}}}}
	f := facts()
	unsched := pod("web-abc-1", "")
	unsched.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: "0/2 nodes are available: 2 Insufficient memory."}}
	f.Pods = []corev1.Pod{*unsched}
	expect(t, Deployment(d, f), Critical, StageRollout, "the scheduler", "progress deadline", "Insufficient memory")

	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "shop"}, Spec: appsv1.DaemonSetSpec{Selector: d.Spec.Selector},
		Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, NumberReady: 3, UpdatedNumberScheduled: 3}}
	if fd := DaemonSet(ds, f); !fd.Healthy() {
		t.Errorf("rolled out daemonset: %+v", fd)
	}
	ds.Status.NumberReady = 2
	expect(t, DaemonSet(ds, f), Warning, StageRollout, "scheduler", "ready on 2/3 devices")

	// With prepull, a device that cannot verify the next image keeps its
	// old pod: the image's signature is what to fix.
	ds.Annotations = map[string]string{api.AnnotationPrepull: "true"}
	ds.Status.NumberReady, ds.Status.UpdatedNumberScheduled = 3, 1
	old := func(name, node string, c corev1.PodCondition) corev1.Pod {
		p := pod(name, node)
		p.Annotations = map[string]string{api.AnnotationPrepullImages: "reg/app@sha256:ab"}
		p.Status.Conditions = append(p.Status.Conditions, c)
		return *p
	}
	f.Pods = []corev1.Pod{
		old("web-1", "kiosk-1", corev1.PodCondition{Type: api.ConditionImagesPrepulled, Status: corev1.ConditionFalse, Reason: "ErrImageSignature", Message: `image "reg/app@sha256:ab" for the next revision: no signature`}),
		old("web-2", "kiosk-2", corev1.PodCondition{Type: api.ConditionImagesPrepulled, Status: corev1.ConditionFalse, Reason: "Pulling"}),
	}
	expect(t, DaemonSet(ds, f), Critical, StageSignature, "signature", "1 device(s) cannot pull the next revision", "pod/web-1 on kiosk-1: image", "no signature", "1 device(s) still pulling")
	f.Pods = f.Pods[1:]
	expect(t, DaemonSet(ds, f), Warning, StageRollout, "", "ready on 3/3 devices, 1 up to date", "1 device(s) still pulling the next revision's images")
}

func TestSortWorstFirst(t *testing.T) {
	fs := []Finding{
		{Severity: Warning, Stage: StageReadiness, Object: "pod/a"},
		{Severity: Critical, Stage: StageRunning, Object: "pod/b"},
		{Severity: Critical, Stage: StageDevice, Object: "node/z"},
		{Severity: OK, Stage: StageDone, Object: "pod/c"},
	}
	Sort(fs)
	var got []string
	for _, f := range fs {
		got = append(got, f.Object)
	}
	if strings.Join(got, " ") != "node/z pod/b pod/a pod/c" {
		t.Errorf("order %v", got)
	}
}

func TestDaemonSetNamesTheHeldWave(t *testing.T) {
	labels := map[string]string{"app": "kiosk"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shops", Name: "kiosk", Labels: labels, Generation: 3},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 3, DesiredNumberScheduled: 10, UpdatedNumberScheduled: 2, NumberReady: 10}}
	rp := &v1alpha1.RolloutPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shops", Name: "kiosks"},
		Spec: v1alpha1.RolloutPolicySpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Paused: true},
		Status: v1alpha1.RolloutPolicyStatus{Workloads: []v1alpha1.WorkloadRollout{{Kind: "DaemonSet", Name: "kiosk", ObservedGeneration: 3,
			Phase: v1alpha1.RolloutPaused, CurrentWave: "canary"}}}}
	fd := DaemonSet(ds, &Facts{Now: now, RolloutPolicies: []*v1alpha1.RolloutPolicy{rp}})
	if fd.Stage != StageRollout || fd.Owner != "RolloutPolicy shops/kiosks" || !strings.Contains(fd.Summary, `8 device(s) run the previous revision: the rollout is held at wave "canary"`) ||
		!strings.Contains(strings.Join(fd.Details, "\n"), "flotctl rollout resume daemonset kiosk") {
		t.Errorf("%+v", fd)
	}
	// A Deployment's replicas, the same way.
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shops", Name: "kiosk", Labels: labels, Generation: 3},
		Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(10))},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 10, UpdatedReplicas: 3, ReadyReplicas: 10, AvailableReplicas: 10,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}}}
	rp.Status.Workloads[0].Kind = "Deployment"
	fd = Deployment(d, &Facts{Now: now, RolloutPolicies: []*v1alpha1.RolloutPolicy{rp}})
	if fd.Owner != "RolloutPolicy shops/kiosks" || !strings.Contains(fd.Summary, `7 replica(s) run the previous revision: the rollout is held at wave "canary"`) ||
		!strings.Contains(strings.Join(fd.Details, "\n"), "flotctl rollout resume deployment kiosk") {
		t.Errorf("deployment: %+v", fd)
	}
	rp.Status.Workloads[0].Kind = "DaemonSet"
	// Without the policy, the same DaemonSet is just behind.
	if fd := DaemonSet(ds, &Facts{Now: now}); fd.Owner == "RolloutPolicy shops/kiosks" {
		t.Errorf("%+v", fd)
	}
}
