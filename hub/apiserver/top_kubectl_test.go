package apiserver_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/internal/testbin"
)

// TestKubectlTopFromReports: upstream kubectl top nodes and top pods
// against a hub holding a device's usage report (the device is its
// certificate; test/e2e's TestKubectlTop runs a real one).
func TestKubectlTopFromReports(t *testing.T) {
	kubectl := testbin.Kubectl(t)
	h := hubtest.Start(t)
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kiosk-1"}}
	node, err := h.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("2Gi")}
	node.Status.Allocatable = node.Status.Capacity
	if _, err := h.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "kiosk-1", Containers: []corev1.Container{{Name: "app", Image: "example.com/app@sha256:" + strings.Repeat("b", 64)}}}}
	if _, err := h.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rep := agentapi.UsageReport{Time: time.Now(), WindowMS: 60000, IntervalS: 60, CPU: 500e6, Memory: 512 << 20,
		Pods: []agentapi.PodUsage{{Namespace: "default", Name: "web", Containers: []agentapi.ContainerUsage{{Name: "app", CPU: 120e6, Memory: 48 << 20}}}}}
	if err := postUsage(ctx, h.NodeClient("kiosk-1"), rep); err != nil {
		t.Fatal(err)
	}
	top := func(args ...string) string {
		t.Helper()
		var out []byte
		deadline := time.Now().Add(10 * time.Second)
		for {
			var err error
			out, err = exec.Command(kubectl, append([]string{"--kubeconfig", h.KubeconfigPath(), "top"}, args...)...).CombinedOutput()
			if err == nil || time.Now().After(deadline) {
				if err != nil {
					t.Fatalf("kubectl top %v: %v\n%s", args, err, out)
				}
				return strings.Join(strings.Fields(string(out)), " ")
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// 500m of 2 cores, 512Mi of 2Gi.
	if out := top("nodes"); !strings.Contains(out, "kiosk-1 500m 25% 512Mi 25%") {
		t.Errorf("kubectl top nodes: %s", out)
	}
	if out := top("pods", "-l", "app=web", "--containers"); !strings.Contains(out, "web app 120m 48Mi") {
		t.Errorf("kubectl top pods --containers: %s", out)
	}
	if out := top("pods", "-A"); !strings.Contains(out, "default web 120m 48Mi") {
		t.Errorf("kubectl top pods -A: %s", out)
	}
}
