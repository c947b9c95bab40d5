package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/hub/scheduler"
)

func schedulerLoop() hub.Loop {
	return hub.Loop{Name: "scheduler", Run: func(ctx context.Context, cfg *rest.Config) error {
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		s, err := scheduler.New(client, informers.NewSharedInformerFactory(client, 0),
			scheduler.Config{InitialBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
		if err != nil {
			return err
		}
		return s.Run(ctx)
	}}
}

func createNode(t *testing.T, c kubernetes.Interface, name, mem string, ready corev1.ConditionStatus, labels map[string]string, taints ...corev1.Taint) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
	n, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating node %s: %v", name, err)
	}
	n.Status = corev1.NodeStatus{
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse(mem), corev1.ResourcePods: resource.MustParse("110")},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse(mem),
			corev1.ResourcePods: resource.MustParse("110")},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
	}
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("node %s status: %v", name, err)
	}
}

func createPod(t *testing.T, c kubernetes.Interface, name, mem string, mod func(*corev1.Pod)) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "registry.local/app@sha256:" + fmt.Sprintf("%064d", 0),
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mem)}},
		}}},
	}
	if mod != nil {
		mod(p)
	}
	if _, err := c.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
}

func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func scheduledCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodScheduled {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// TestAgainstHub runs the scheduler inside a real hub and checks
// bindings and the FailedScheduling words for every filter.
func TestAgainstHub(t *testing.T) {
	h := hubtest.Start(t, hubtest.Options{Loops: []hub.Loop{schedulerLoop()}})
	c := h.Client
	unreachable := corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}
	for i := range 3 {
		createNode(t, c, fmt.Sprintf("small-%d", i), "1Gi", corev1.ConditionTrue, map[string]string{"site": "berlin"})
	}
	for i := range 2 {
		createNode(t, c, fmt.Sprintf("gone-%d", i), "8Gi", corev1.ConditionUnknown, map[string]string{"site": "paris"}, unreachable)
	}

	for _, tc := range []struct {
		name, mem string
		mod       func(*corev1.Pod)
		want      string
	}{
		{"too-big", "2Gi", nil,
			"0/5 nodes are available: 2 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, 3 Insufficient memory." +
				" preemption: 0/5 nodes are available: 2 Preemption is not helpful for scheduling, 3 No preemption victims found for incoming pod."},
		{"wrong-site", "1Mi", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"site": "rome"} },
			"0/5 nodes are available: 2 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, 3 node(s) didn't match Pod's node affinity/selector." +
				" preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling."},
		{"affinity", "1Mi", func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "site", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"berlin"}}}}}}}}
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
		}, "0/5 nodes are available: 2 node(s) were not ready, 3 node(s) didn't match Pod's node affinity/selector." +
			" preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling."},
	} {
		createPod(t, c, tc.name, tc.mem, tc.mod)
		waitFor(t, "pod "+tc.name+" marked unschedulable", func(ctx context.Context) (bool, error) {
			p, err := c.CoreV1().Pods("default").Get(ctx, tc.name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			cond := scheduledCondition(p)
			if cond == nil || cond.Status != corev1.ConditionFalse {
				return false, nil
			}
			if cond.Reason != corev1.PodReasonUnschedulable || cond.Message != tc.want {
				return false, fmt.Errorf("PodScheduled=False %s %q, want %q", cond.Reason, cond.Message, tc.want)
			}
			return true, nil
		})
		waitFor(t, "FailedScheduling event for "+tc.name, func(ctx context.Context) (bool, error) {
			evs, err := c.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", tc.name).String()})
			if err != nil {
				return false, err
			}
			for _, e := range evs.Items {
				if e.InvolvedObject.Name == tc.name && e.Type == corev1.EventTypeWarning && e.Reason == "FailedScheduling" && e.Message == tc.want {
					return true, nil
				}
			}
			return false, nil
		})
	}

	// Host ports: the first pod takes 8080 on each small node, the fourth
	// finds none free.
	for i := range 4 {
		createPod(t, c, fmt.Sprintf("port-%d", i), "1Mi", func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{"site": "berlin"}
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 8080}}
		})
	}
	portMsg := "0/5 nodes are available: 2 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, 3 node(s) didn't have free ports for the requested pod ports." +
		" preemption: 0/5 nodes are available: 2 Preemption is not helpful for scheduling, 3 No preemption victims found for incoming pod."
	waitFor(t, "three port pods bound on three nodes, the fourth refused", func(ctx context.Context) (bool, error) {
		pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		nodes := map[string]bool{}
		refused := 0
		for _, p := range pods.Items {
			if len(p.Name) < 5 || p.Name[:5] != "port-" {
				continue
			}
			if p.Spec.NodeName != "" {
				if nodes[p.Spec.NodeName] {
					return false, fmt.Errorf("two pods with host port 8080 on %s", p.Spec.NodeName)
				}
				nodes[p.Spec.NodeName] = true
			} else if cond := scheduledCondition(&p); cond != nil && cond.Message == portMsg {
				refused++
			}
		}
		return len(nodes) == 3 && refused == 1, nil
	})

	// A node that fits arrives: the big pod is retried and bound to it.
	createNode(t, c, "roomy", "4Gi", corev1.ConditionTrue, map[string]string{"site": "berlin"})
	waitFor(t, "too-big bound to the new node", func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods("default").Get(ctx, "too-big", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" && p.Spec.NodeName != "roomy" {
			return false, fmt.Errorf("bound to %s", p.Spec.NodeName)
		}
		return p.Spec.NodeName == "roomy", nil
	})
}
