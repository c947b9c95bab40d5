package ctl

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"flotilla.dev/flotilla/api"
	"flotilla.dev/flotilla/api/v1alpha1"
	"flotilla.dev/flotilla/internal/testlog"
)

var now = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func before(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }
func ptr[T any](v T) *T                  { return &v }

type harness struct {
	t        *testing.T
	typed    *fake.Clientset
	dynamic  *dynfake.FakeDynamicClient
	out, err *testlog.Buffer
	stdin    string
}

// newHarness serves objs from client-go's fake clientsets; GitSources and
// RolloutPolicies go to the dynamic fake, everything else to the typed one.
func newHarness(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	var typedObjs, dynObjs []runtime.Object
	for _, o := range objs {
		switch o.(type) {
		case *v1alpha1.GitSource, *v1alpha1.RolloutPolicy:
			dynObjs = append(dynObjs, o)
		default:
			typedObjs = append(typedObjs, o)
		}
	}
	return &harness{
		t:       t,
		typed:   fake.NewClientset(typedObjs...),
		dynamic: dynfake.NewSimpleDynamicClientWithCustomListKinds(api.Scheme, map[schema.GroupVersionResource]string{gitSourceGVR: "GitSourceList", rolloutPolicyGVR: "RolloutPolicyList", nodeMetricsGVR: "NodeMetricsList"}, dynObjs...),
	}
}

// run runs flotctl with args and returns stdout, stderr and the exit code.
func (h *harness) run(args ...string) (string, string, int) {
	return h.runCtx(context.Background(), args...)
}

func (h *harness) runCtx(ctx context.Context, args ...string) (string, string, int) {
	h.out, h.err = &testlog.Buffer{}, &testlog.Buffer{}
	app := &App{In: strings.NewReader(h.stdin), Out: h.out, Err: h.err, Now: func() time.Time { return now },
		Getenv: func(string) string { return "" },
		Connect: func(f *ConfigFlags) (*Clients, error) {
			return &Clients{Typed: h.typed, Dynamic: h.dynamic, Namespace: "default"}, nil
		}}
	code := Main(ctx, app, args)
	return h.out.String(), h.err.String(), code
}

func (h *harness) ok(args ...string) string {
	h.t.Helper()
	out, errOut, code := h.run(args...)
	if code != 0 {
		h.t.Fatalf("flotctl %s: exit %d\nstderr: %s\nstdout: %s", strings.Join(args, " "), code, errOut, out)
	}
	return out
}

func pod(ns, name, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, CreationTimestamp: before(time.Hour), ResourceVersion: "1"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.local/app@sha256:abc"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.42.1.2",
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
}

func node(name string, ready bool) *corev1.Node {
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionUnknown
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: before(48 * time.Hour), Labels: map[string]string{"kubernetes.io/arch": "arm64"}},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v0.1.0", Architecture: "arm64"},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, LastHeartbeatTime: before(7 * time.Minute)}}}}
}

func deployment(name string, replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name), Generation: 1, CreationTimestamp: before(time.Hour)},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.local/app@sha256:v2"}}}}},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: replicas, UpdatedReplicas: replicas, ReadyReplicas: replicas, AvailableReplicas: replicas}}
}

func gitSource(name string, ready bool) *v1alpha1.GitSource {
	st, msg := metav1.ConditionTrue, "applied"
	if !ready {
		st, msg = metav1.ConditionFalse, "apps/web.yaml: Deployment \"web\": spec.replicas: Invalid value: -1"
	}
	return &v1alpha1.GitSource{TypeMeta: metav1.TypeMeta{APIVersion: "flotilla.dev/v1alpha1", Kind: "GitSource"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, CreationTimestamp: before(2 * time.Hour)},
		Spec:       v1alpha1.GitSourceSpec{URL: "file:///srv/git/fleet.git", Ref: v1alpha1.GitRef{Branch: "main"}},
		Status: v1alpha1.GitSourceStatus{LastAppliedCommit: "aaaaaaa111", LastAttemptedCommit: "bbbbbbb222",
			Conditions: []metav1.Condition{{Type: "Ready", Status: st, Reason: "Reconciled", Message: msg, LastTransitionTime: before(time.Minute)}}}}
}
