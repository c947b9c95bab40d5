package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/agent/runtime/podns"
	"flotilla.dev/flotilla/agent/server"
	"flotilla.dev/flotilla/internal/testlog"
)

// testLog is the agent's log in a test: on stderr with FLOTILLA_TEST_LOG
// set, else kept and shown (its last 256 KiB) only if the test fails, so
// that a failure seen once in CI can be explained afterwards.
func testLog(t testing.TB) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.LevelDebug}
	if os.Getenv("FLOTILLA_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, opts))
	}
	w := &testlog.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the agent's log (last 256 KiB):\n%s", w.Tail(256<<10))
		}
	})
	return slog.New(slog.NewTextHandler(w, opts))
}

func TestConfigErrors(t *testing.T) {
	creds := KubeconfigCredentials("/x", "")
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"no name":                {Config{Credentials: creds}, "node name"},
		"bad name":               {Config{NodeName: "Dev_1", Credentials: creds}, "node name"},
		"relative manifests dir": {Config{NodeName: "dev1", ManifestsDir: "manifests"}, "--manifests-dir"},
		"bad ip":                 {Config{NodeName: "dev1", Credentials: creds, NodeIP: "1.2.3"}, "--node-ip"},
		"bad listen":             {Config{NodeName: "dev1", Credentials: creds, ServerListen: "10250"}, "--server-listen"},
		"relative dir":           {Config{NodeName: "dev1", Credentials: creds, DataDir: "state"}, "--data-dir"},
		"bad label":              {Config{NodeName: "dev1", Credentials: creds, Labels: map[string]string{"kubernetes.io/os": "x"}}, "set by the agent"},
		"max pods":               {Config{NodeName: "dev1", Credentials: creds, MaxPods: -1}, "--max-pods"},
	} {
		_, err := New(tc.cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrConfig with %q", name, err, tc.want)
		}
	}
	if _, err := KubeconfigCredentials(filepath.Join(t.TempDir(), "nope"), "")(context.Background()); !errors.Is(err, ErrConfig) {
		t.Errorf("missing kubeconfig: %v", err)
	}
	if _, err := caPool(&rest.Config{}); !errors.Is(err, ErrConfig) {
		t.Errorf("a config without a CA: %v", err)
	}
}

func TestPodCIDRFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "pod-cidr")
	if readCIDR(p) != "" {
		t.Error("a missing file has no CIDR")
	}
	if err := writeCIDR(p, "10.42.9.0/24"); err != nil {
		t.Fatal(err)
	}
	if got := readCIDR(p); got != "10.42.9.0/24" {
		t.Errorf("readCIDR = %q", got)
	}
	os.WriteFile(p, []byte("garbage"), 0o644)
	if readCIDR(p) != "" {
		t.Error("garbage is no CIDR")
	}
}

// TestAgentEndToEnd runs a whole agent against a real hub and containerd:
// it registers, reports Ready once the pod CIDR is assigned, writes the
// CNI config, runs a pod, and serves its log to the hub's pods/log.
func TestAgentEndToEnd(t *testing.T) {
	d := newTestDevice(t)
	d.start()
	defer d.stop()
	h, name, dir, hostNS, image := d.hub, d.name, d.dir, d.hostNS, d.img
	stop := d.stop

	c := h.Client
	bg := context.Background()
	ready := func() *corev1.NodeCondition {
		n, err := c.CoreV1().Nodes().Get(bg, name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				return &n.Status.Conditions[i]
			}
		}
		return nil
	}
	waitFor(t, "the node, not ready for want of a pod CIDR", 60*time.Second, func() bool {
		r := ready()
		return r != nil && r.Status == corev1.ConditionFalse && strings.Contains(r.Message, "pod CIDR")
	})
	n, err := c.CoreV1().Nodes().Get(bg, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Annotations[server.AnnotationServingCertHash] == "" || n.Labels["site"] != "lab" || !strings.HasPrefix(n.Status.NodeInfo.ContainerRuntimeVersion, "containerd://") {
		t.Errorf("node: annotations %v, labels %v, nodeInfo %+v", n.Annotations, n.Labels, n.Status.NodeInfo)
	}
	// What the hub's node lifecycle controller does.
	n.Spec.PodCIDR, n.Spec.PodCIDRs = "10.88.7.0/24", []string{"10.88.7.0/24"}
	if _, err := c.CoreV1().Nodes().Update(bg, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Ready=True", 60*time.Second, func() bool {
		r := ready()
		return r != nil && r.Status == corev1.ConditionTrue
	})
	conf, err := os.ReadFile(filepath.Join(dir, "net.d", "10-flotilla.conflist"))
	if err != nil || !strings.Contains(string(conf), "10.88.7.0/24") {
		t.Errorf("CNI config: %v\n%s", err, conf)
	}
	if got := readCIDR(filepath.Join(dir, "data", podCIDRFile)); got != "10.88.7.0/24" {
		t.Errorf("remembered pod CIDR = %q", got)
	}

	// The service proxy programs the device's namespace.
	waitFor(t, "the service proxy's chains", 60*time.Second, func() bool {
		return exec.Command("nsenter", "--net="+hostNS, "iptables", "-t", "nat", "-S", "FLOTILLA-SERVICES").Run() == nil
	})

	// The routes' egress chain is there too, and the cluster DNS server
	// answers for a Service on the pod bridge's address.
	if out, err := exec.Command("nsenter", "--net="+hostNS, "iptables", "-t", "nat", "-S", "FLOTILLA-EGRESS").CombinedOutput(); err != nil {
		t.Errorf("pod routes' egress chain: %v\n%s", err, out)
	}
	svc, err := c.CoreV1().Services("default").Create(bg, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The bridge, and so its address, appears with the first pod on the
	// pod network; this test runs host-network pods only, so the address
	// goes on lo for the query to have somewhere to go.
	if out, err := exec.Command("nsenter", "--net="+hostNS, "ip", "addr", "add", "10.88.7.1/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("adding the bridge address: %v\n%s", err, out)
	}
	waitFor(t, "the cluster DNS answer for web.default", 60*time.Second, func() bool {
		var got string
		podns.Do(hostNS, func() error {
			m := new(mdns.Msg)
			m.SetQuestion("web.default.svc.cluster.local.", mdns.TypeA)
			r, _, err := (&mdns.Client{Timeout: time.Second}).Exchange(m, "10.88.7.1:53")
			if err == nil && len(r.Answer) == 1 {
				if a, ok := r.Answer[0].(*mdns.A); ok {
					got = a.A.String()
				}
			}
			return nil
		})
		return got != "" && got == svc.Spec.ClusterIP
	})

	// A pod runs and its log reaches kubectl's API through the hub.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName: name, HostNetwork: true, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "app", Image: image, Args: []string{"echo", "hello from the pod"}}},
		},
	}
	if _, err := c.CoreV1().Pods("default").Create(bg, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod to succeed", 120*time.Second, func() bool {
		p, err := c.CoreV1().Pods("default").Get(bg, "hello", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodSucceeded
	}, func() string {
		p, _ := c.CoreV1().Pods("default").Get(bg, "hello", metav1.GetOptions{})
		ev, _ := c.CoreV1().Events("default").List(bg, metav1.ListOptions{})
		var b strings.Builder
		fmt.Fprintf(&b, "pod status: %+v\n", p.Status)
		for _, e := range ev.Items {
			fmt.Fprintf(&b, "event %s %s: %s\n", e.Type, e.Reason, e.Message)
		}
		return b.String()
	})
	rc, err := c.CoreV1().Pods("default").GetLogs("hello", &corev1.PodLogOptions{}).Stream(bg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(got) != "hello from the pod\n" {
		t.Errorf("logs through the hub = %q, %v", got, err)
	}
	// A follow of an exited container ends by itself.
	fctx, fcancel := context.WithTimeout(bg, 60*time.Second)
	defer fcancel()
	rc, err = c.CoreV1().Pods("default").GetLogs("hello", &corev1.PodLogOptions{Follow: true}).Stream(fctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(rc)
	rc.Close()
	if err != nil || string(got) != "hello from the pod\n" || fctx.Err() != nil {
		t.Errorf("follow of an exited container = %q, %v (ctx %v)", got, err, fctx.Err())
	}

	if err := c.CoreV1().Pods("default").Delete(bg, "hello", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod to be gone", 120*time.Second, func() bool {
		_, err := c.CoreV1().Pods("default").Get(bg, "hello", metav1.GetOptions{})
		return err != nil
	})
	stop()
}

func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool, state ...func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			for _, s := range state {
				t.Log(s())
			}
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
