package apiserver_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentserver "flotilla.dev/flotilla/agent/server"
	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/internal/testbin"
)

func criLine(t time.Time, stream, tag, content string) string {
	return t.UTC().Format(time.RFC3339Nano) + " " + stream + " " + tag + " " + content + "\n"
}

// TestPodLogsThroughTheHub serves a CRI log file from a real agent server
// and reads it through the hub's pods/log with client-go and kubectl.
func TestPodLogsThroughTheHub(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	logDir := t.TempDir()
	cert, err := agentserver.LoadOrCreateServingCert(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := agentserver.New(agentserver.Config{
		Listen: "127.0.0.1:0", LogDir: logDir, Certificate: cert, ClientCAs: h.PKI().CAPool(),
		Poll: 10 * time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(sctx) }()
	defer func() { stop(); <-done }()
	pin, _ := agentserver.CertHash(cert)

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Annotations: map[string]string{agentapi.AnnotationServingCertHash: pin}}}
	if node, err = h.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(srv.Addr().(*net.TCPAddr).Port)
	if _, err = h.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	mkPod := func(name, nodeName string, containers ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{NodeName: nodeName}}
		for _, c := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: testImage})
		}
		p, err := h.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	pod := mkPod("web", "edge-1", "app")
	dir := filepath.Join(logDir, "default_web_"+string(pod.UID), "app")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	os.WriteFile(filepath.Join(dir, "0.log"), []byte(criLine(t0, "stdout", "F", "first run")), 0o644)
	os.WriteFile(filepath.Join(dir, "1.log"), []byte(criLine(t0, "stdout", "F", "hello")+criLine(t0.Add(time.Second), "stderr", "P", "wor")+criLine(t0.Add(time.Second), "stderr", "F", "ld")), 0o644)

	logs := func(name string, o *corev1.PodLogOptions) (string, error) {
		// Stream, as kubectl does: it decodes a Status error (DoRaw does not).
		rc, err := h.Client.CoreV1().Pods("default").GetLogs(name, o).Stream(ctx)
		if err != nil {
			return "", err
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		return string(b), err
	}
	tail := int64(1)
	for _, tc := range []struct {
		name string
		opts corev1.PodLogOptions
		want string
	}{
		{"all", corev1.PodLogOptions{}, "hello\nworld\n"},
		{"tail", corev1.PodLogOptions{TailLines: &tail}, "world\n"},
		{"timestamps", corev1.PodLogOptions{Timestamps: true, TailLines: &tail}, "2030-01-02T03:04:06Z world\n"},
		{"previous", corev1.PodLogOptions{Previous: true, Container: "app"}, "first run\n"},
	} {
		got, err := logs("web", &tc.opts)
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}

	// Refusals carry Kubernetes' codes and say why.
	mkPod("two", "edge-1", "a", "b")
	mkPod("pending", "", "app")
	mkPod("ghost", "edge-2", "app")
	for _, tc := range []struct {
		name, pod string
		opts      corev1.PodLogOptions
		check     func(error) bool
		msg       string
	}{
		{"no such pod", "nope", corev1.PodLogOptions{}, apierrors.IsNotFound, "nope"},
		{"which container", "two", corev1.PodLogOptions{}, apierrors.IsBadRequest, "a container name must be specified for pod two, choose one of: [a b]"},
		{"unknown container", "web", corev1.PodLogOptions{Container: "db"}, apierrors.IsBadRequest, "container db is not valid for pod web"},
		{"not scheduled", "pending", corev1.PodLogOptions{}, apierrors.IsBadRequest, "does not have a host assigned"},
		{"node gone", "ghost", corev1.PodLogOptions{}, apierrors.IsBadRequest, "edge-2, which does not exist"},
		{"no logs yet", "two", corev1.PodLogOptions{Container: "a"}, apierrors.IsNotFound, "has no logs on this node"},
	} {
		_, err := logs(tc.pod, &tc.opts)
		if !tc.check(err) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.msg)
		}
	}
	os.MkdirAll(filepath.Join(logDir, "default_two_x", "a"), 0o755)
	if _, err := logs("two", &corev1.PodLogOptions{Container: "a", Previous: true}); !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "waiting to start") {
		t.Errorf("no attempt yet: %v", err)
	}
	err = h.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/default/pods/web/log").Param("tailLines", "x").Do(ctx).Error()
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "tailLines") {
		t.Errorf("bad tailLines: %v", err)
	}

	// Follow: lines written after the request arrive on the stream.
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	zero := int64(0)
	stream, err := h.Client.CoreV1().Pods("default").GetLogs("web", &corev1.PodLogOptions{Follow: true, TailLines: &zero}).Stream(fctx)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "1.log"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(criLine(t0.Add(2*time.Second), "stdout", "F", "live"))
	f.Close()
	line, err := bufio.NewReader(stream).ReadString('\n')
	if err != nil || line != "live\n" {
		t.Errorf("followed %q, %v", line, err)
	}
	stream.Close()

	// kubectl logs works unchanged.
	kubectl := testbin.Kubectl(t)
	out, err := exec.Command(kubectl, "--kubeconfig", h.KubeconfigPath(), "logs", "web", "--tail=2").CombinedOutput()
	if err != nil || string(out) != "world\nlive\n" {
		t.Errorf("kubectl logs: %v\n%s", err, out)
	}
	out, err = exec.Command(kubectl, "--kubeconfig", h.KubeconfigPath(), "logs", "web", "-c", "db").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "container db is not valid for pod web") {
		t.Errorf("kubectl logs of an unknown container: %v\n%s", err, out)
	}

	// A node whose published pin does not match is refused.
	node, _ = h.Client.CoreV1().Nodes().Get(ctx, "edge-1", metav1.GetOptions{})
	node.Annotations[agentapi.AnnotationServingCertHash] = "sha256:00"
	if _, err := h.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := logs("web", &corev1.PodLogOptions{}); !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "publishes sha256:00") {
		t.Errorf("wrong pin: %v", err)
	}
}
