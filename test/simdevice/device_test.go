package simdevice_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/test/simdevice"
)

const img = "registry.local/app@sha256:0000000000000000000000000000000000000000000000000000000000000001"

func pod(name, node string, mod func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: img}},
		},
	}
	if mod != nil {
		mod(p)
	}
	return p
}

func waitPod(t *testing.T, c kubernetes.Interface, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("pod %s: %s: %v\nlast status: %+v", name, what, err, last)
	}
	return last
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestDevice: a pod bound to a simulated device is started by its
// kubelet (the ready delay, an address, probes answered in memory) and
// made Ready; a NeverReady pod crash-loops; a deleted pod is stopped and
// its deletion finished; the device's directory goes when Run ends.
func TestDevice(t *testing.T) {
	h := hubtest.Start(t)
	c := h.Client
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, err := simdevice.New(c, simdevice.Config{
		Name: "sim-0", Labels: map[string]string{"site": "lab"}, ReadyDelay: 300 * time.Millisecond, RenewInterval: 100 * time.Millisecond,
		NeverReady: func(p *corev1.Pod) bool { return p.Labels["broken"] == "yes" },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Register(ctx); err != nil {
		t.Fatal(err)
	}
	// Give the node a pod CIDR, as the hub's node loop does.
	node, err := c.CoreV1().Nodes().Get(ctx, "sim-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels["site"] != "lab" || len(node.Status.Conditions) != 1 || node.Status.Conditions[0].Status != corev1.ConditionTrue {
		t.Fatalf("node as registered: labels %v, conditions %v", node.Labels, node.Status.Conditions)
	}
	node.Spec.PodCIDR, node.Spec.PodCIDRs = "10.42.3.0/24", []string{"10.42.3.0/24"}
	if _, err := c.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	before, _ := filepath.Glob(filepath.Join(os.TempDir(), "simdevice-sim-0-*"))
	go func() { runErr <- d.Run(ctx) }()

	start := time.Now()
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod("plain", "sim-0", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, "plain", "Running and Ready", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && ready(p) })
	took := time.Since(start)
	t.Logf("a pod without probes is Ready after %s (ready delay 300ms)", took)
	if took < 300*time.Millisecond {
		t.Errorf("Ready after %s, before the ready delay", took)
	}

	probe := func(h corev1.ProbeHandler) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: h, PeriodSeconds: 1, FailureThreshold: 3, SuccessThreshold: 1, TimeoutSeconds: 1}
	}
	start = time.Now()
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod("web", "sim-0", func(p *corev1.Pod) {
		ctr := &p.Spec.Containers[0]
		ctr.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
		ctr.ReadinessProbe = probe(corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}})
		ctr.LivenessProbe = probe(corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}})
		ctr.StartupProbe = probe(corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9000}})
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: "/var/lib/simdevice-test-should-not-exist", Type: ptrTo(corev1.HostPathDirectoryOrCreate)}}}}
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := waitPod(t, c, "web", "Running and Ready", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && ready(p) })
	t.Logf("a pod with startup (grpc), readiness (httpGet) and liveness (tcpSocket) probes is Ready after %s", time.Since(start))
	if got := web.Status.PodIP; len(got) < 8 || got[:8] != "10.42.3." {
		t.Errorf("pod IP %q, want one of the node's pod CIDR 10.42.3.0/24", got)
	}
	if web.Status.HostIP != simdevice.HostIP || len(web.Status.ContainerStatuses) != 1 || !web.Status.ContainerStatuses[0].Ready {
		t.Errorf("status: hostIP %q, containers %+v", web.Status.HostIP, web.Status.ContainerStatuses)
	}
	if _, err := os.Stat("/var/lib/simdevice-test-should-not-exist"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the hostPath volume was made on the machine: %v", err)
	}
	// The hub may show a status before the kubelet's write of it has
	// returned to the device, which counts it then.
	for deadline := time.Now().Add(5 * time.Second); d.PodsReadied() != 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := d.PodsReadied(); n != 2 {
		t.Errorf("PodsReadied = %d, want 2", n)
	}

	// A broken release: started, never Ready, restarted with backoff.
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod("broken", "sim-0", func(p *corev1.Pod) {
		p.Labels = map[string]string{"broken": "yes"}
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, "broken", "crash-looping", func(p *corev1.Pod) bool {
		if ready(p) {
			t.Fatalf("a NeverReady pod is Ready: %+v", p.Status)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.LastTerminationState.Terminated != nil && cs.LastTerminationState.Terminated.ExitCode == 1 &&
				cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" {
				return true
			}
		}
		return false
	})
	if n := d.PodsReadied(); n != 2 {
		t.Errorf("PodsReadied = %d after a NeverReady pod, want 2", n)
	}

	// The link goes down: no renewals, and what the hub writes meanwhile
	// (the node Unknown, its pods not Ready) stands.
	d.SetRenewing(false)
	renewed := func() time.Time {
		l, err := c.CoordinationV1().Leases("kube-node-lease").Get(ctx, "sim-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Spec.RenewTime.Time
	}
	time.Sleep(200 * time.Millisecond)
	lastRenewed := renewed()
	node, err = c.CoreV1().Nodes().Get(ctx, "sim-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions[0].Status = corev1.ConditionUnknown
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	plain, err := c.CoreV1().Pods("default").Get(ctx, "plain", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range plain.Status.Conditions {
		if plain.Status.Conditions[i].Type == corev1.PodReady {
			plain.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	if _, err := c.CoreV1().Pods("default").UpdateStatus(ctx, plain, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A change makes the kubelet look at the pod (and try to write).
	if _, err := c.CoreV1().Pods("default").Patch(ctx, "plain", types.MergePatchType, []byte(`{"metadata":{"labels":{"poke":"1"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if p, err := c.CoreV1().Pods("default").Get(ctx, "plain", metav1.GetOptions{}); err != nil || ready(p) {
		t.Errorf("with its link down the device wrote its pod Ready again (%v)", err)
	}
	if !renewed().Equal(lastRenewed) {
		t.Error("the lease was renewed with the link down")
	}
	// Back: the lease, the node Ready, the pod Ready.
	d.SetRenewing(true)
	waitPod(t, c, "plain", "Ready again", ready)
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := c.CoreV1().Nodes().Get(ctx, "sim-0", metav1.GetOptions{})
		return err == nil && n.Status.Conditions[0].Status == corev1.ConditionTrue && renewed().After(lastRenewed), nil
	}); err != nil {
		t.Errorf("the node is not Ready and renewed again: %v", err)
	}

	// Deletion: the kubelet stops the pod and finishes the deletion.
	start = time.Now()
	if err := c.CoreV1().Pods("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("the deleted pod stays: %v", err)
	}
	t.Logf("deletion finished after %s", time.Since(start))

	cancel()
	select {
	case err := <-runErr:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	after, _ := filepath.Glob(filepath.Join(os.TempDir(), "simdevice-sim-0-*"))
	if len(after) > len(before) {
		t.Errorf("the device's directory is left: %v", after)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestFleet: StartFleet registers every device, with its labels and
// taints, before it returns.
func TestFleet(t *testing.T) {
	h := hubtest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	cfgs := simdevice.Named("fleet", 20, func(i int, c *simdevice.Config) {
		c.Labels = map[string]string{"i": fmt.Sprint(i)}
		if i == 3 {
			c.Taints = []corev1.Taint{{Key: "pos", Effect: corev1.TaintEffectNoSchedule}}
		}
	})
	f, err := simdevice.StartFleet(ctx, h.Client, cfgs)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := h.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 20 || len(f.Devices) != 20 {
		t.Fatalf("%d nodes, %d devices", len(nodes.Items), len(f.Devices))
	}
	for i, d := range f.Devices {
		if d.Name() != fmt.Sprintf("fleet-%d", i) {
			t.Errorf("device %d is %s", i, d.Name())
		}
	}
	for _, n := range nodes.Items {
		if n.Name == "fleet-3" && len(n.Spec.Taints) != 1 {
			t.Errorf("fleet-3 taints %v", n.Spec.Taints)
		}
		if _, err := h.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, n.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("lease of %s: %v", n.Name, err)
		}
	}
	cancel()
	if err := f.Wait(); err != nil {
		t.Error(err)
	}
}
