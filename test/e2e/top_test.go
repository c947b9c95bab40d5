package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"flotilla.dev/flotilla/internal/testbin"
)

// kubectl top, with upstream kubectl, against the hub and a real device
// running the demo's pods: the device reports every 2 s here, so that
// the first report comes soon.
func TestKubectlTop(t *testing.T) {
	f := startFleet(t, 1, "FLOTILLA_USAGE_INTERVAL=2s")
	kubectl := testbin.Kubectl(t)
	kubeconfig := filepath.Join(f.dir, "hub", "admin.kubeconfig")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pods, err := f.cs.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=hello"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("the demo's hello pods: %v (%d)", err, len(pods.Items))
	}
	var running []corev1.Pod
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			running = append(running, p)
		}
	}
	top := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig, "top"}, args...)...).CombinedOutput()
		return string(out), err
	}
	var out string
	waitFor(t, "kubectl top nodes to show dev1", time.Minute, func() (bool, error) {
		var err error
		out, err = top("nodes")
		return err == nil && strings.Contains(out, "dev1"), err
	})
	t.Logf("kubectl top nodes:\n%s", out)
	// NAME CPU(cores) CPU(%) MEMORY(bytes) MEMORY(%): figures, not <unknown>.
	for _, l := range strings.Split(out, "\n") {
		if fs := strings.Fields(l); len(fs) >= 5 && fs[0] == "dev1" {
			if !strings.HasSuffix(fs[1], "m") || !strings.HasSuffix(fs[3], "Mi") || fs[2] == "<unknown>" {
				t.Errorf("dev1's line %q: want CPU in millicores and memory in Mi with percentages", l)
			}
		}
	}
	waitFor(t, "kubectl top pods to show the hello pods", time.Minute, func() (bool, error) {
		var err error
		out, err = top("pods", "-n", "shop", "-l", "app=hello", "--containers")
		if err != nil {
			return false, err
		}
		for _, p := range running {
			if !strings.Contains(out, p.Name) {
				return false, nil
			}
		}
		return true, nil
	})
	t.Logf("kubectl top pods -n shop -l app=hello --containers:\n%s", out)
	// POD NAME CPU(cores) MEMORY(bytes): a Go server holds some memory.
	lines := 0
	for _, l := range strings.Split(out, "\n") {
		fs := strings.Fields(l)
		if len(fs) != 4 || !strings.HasPrefix(fs[0], "hello") {
			continue
		}
		lines++
		if !strings.HasSuffix(fs[2], "m") || !strings.HasSuffix(fs[3], "Mi") || fs[3] == "0Mi" {
			t.Errorf("container line %q: want CPU in millicores and a working set in Mi", l)
		}
	}
	if lines < len(running) {
		t.Errorf("%d container lines for %d running pods:\n%s", lines, len(running), out)
	}
	// A selector that matches nothing is kubectl's "No resources found".
	if out, err := top("pods", "-n", "shop", "-l", "app=nothing"); err != nil || !strings.Contains(out, "No resources found") {
		t.Errorf("top pods -l app=nothing: %v\n%s", err, out)
	}
}
