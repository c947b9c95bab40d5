package apiserver_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	agentserver "flotilla.dev/flotilla/agent/server"
	"flotilla.dev/flotilla/api/agentapi"
	"flotilla.dev/flotilla/hub/audit"
	"flotilla.dev/flotilla/hub/auth"
	"flotilla.dev/flotilla/hub/hubtest"
	"flotilla.dev/flotilla/internal/testbin"
)

// podStreams is a device's side of exec and port-forward: a few commands
// of its own, and every port of the pod dialled to one local server.
type podStreams struct{ target string }

func (p podStreams) Exec(_ context.Context, ref agentserver.ContainerRef, cmd []string, s agentserver.Streams) (int, error) {
	switch cmd[0] {
	case "echo":
		fmt.Fprintf(s.Stdout, "%s in %s\n", strings.Join(cmd[1:], " "), ref)
	case "cat":
		io.Copy(s.Stdout, s.Stdin)
	case "fail":
		return 3, nil
	}
	return 0, nil
}

// AttachMode: every container was started with stdin.
func (p podStreams) AttachMode(context.Context, agentserver.ContainerRef) (agentserver.AttachMode, error) {
	return agentserver.AttachMode{Stdin: true}, nil
}

// Attach answers each line of stdin with "got LINE".
func (p podStreams) Attach(_ context.Context, _ agentserver.ContainerRef, s agentserver.Streams) error {
	sc := bufio.NewScanner(s.Stdin)
	for sc.Scan() {
		fmt.Fprintf(s.Stdout, "got %s\n", sc.Text())
	}
	return nil
}

func (p podStreams) DialPod(ctx context.Context, _, _ string, _ uint16) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", p.target)
}

// TestExecAndPortForwardThroughTheHub runs upstream kubectl exec (with
// and without stdin, an exit code), attach -i and port-forward against a hub whose
// device runs a real agent server; checks that a viewer and a device are
// refused, that sessions are audited, and that a device the hub cannot
// reach says so at once.
func TestExecAndPortForwardThroughTheHub(t *testing.T) {
	kubectl := testbin.Kubectl(t)
	h := hubtest.Start(t)
	ctx := context.Background()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello from the pod\n") }))
	defer web.Close()
	cert, err := agentserver.LoadOrCreateServingCert(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := agentserver.New(agentserver.Config{
		Listen: "127.0.0.1:0", LogDir: t.TempDir(), Certificate: cert, ClientCAs: h.PKI().CAPool(),
		Streamer: podStreams{target: web.Listener.Addr().String()}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(sctx) }()
	defer func() { stop(); <-done }()
	pin, _ := agentserver.CertHash(cert)
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()

	mkNode := func(name string, port int, ready corev1.ConditionStatus) {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{agentapi.AnnotationServingCertHash: pin}}}
		if node, err = h.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
		node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status."}}
		if _, err = h.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mkNode("edge-1", srv.Addr().(*net.TCPAddr).Port, corev1.ConditionTrue)
	mkNode("edge-down", srv.Addr().(*net.TCPAddr).Port, corev1.ConditionUnknown)
	mkNode("edge-gone", closedPort, corev1.ConditionTrue)
	for _, p := range []struct{ name, node string }{{"web", "edge-1"}, {"far", "edge-down"}, {"lost", "edge-gone"}} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: "default"}, Spec: corev1.PodSpec{NodeName: p.node,
			Containers: []corev1.Container{{Name: "app", Image: testImage, Stdin: true}}}}
		pod, err := h.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Status.Phase = corev1.PodRunning // kubectl port-forward asks
		if _, err := h.Client.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	run := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", h.KubeconfigPath()}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("", "exec", "web", "--", "echo", "hi", "there"); err != nil || out != "hi there in default/web/app\n" {
		t.Errorf("kubectl exec: %q, %v", out, err)
	}
	if out, err := run("line one\nline two\n", "exec", "-i", "web", "--", "cat"); err != nil || out != "line one\nline two\n" {
		t.Errorf("kubectl exec -i: %q, %v", out, err)
	}
	if out, err := run("one\ntwo\n", "attach", "-q", "-i", "web"); err != nil || out != "got one\ngot two\n" {
		t.Errorf("kubectl attach -i: %q, %v", out, err)
	}
	out, err := run("", "exec", "web", "--", "fail")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 || !strings.Contains(out, "command terminated with exit code 3") {
		t.Errorf("kubectl exec of a failing command: %q, %v; want exit code 3", out, err)
	}

	// kubectl port-forward, then a GET through it.
	pf := exec.Command(kubectl, "--kubeconfig", h.KubeconfigPath(), "port-forward", "pod/web", ":8080")
	pfOut, _ := pf.StdoutPipe()
	pf.Stderr = pf.Stdout
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { pf.Process.Kill(); pf.Wait() }()
	lines := bufio.NewScanner(pfOut)
	re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)
	var local string
	for local == "" && lines.Scan() {
		if m := re.FindStringSubmatch(lines.Text()); m != nil {
			local = m[1]
		} else {
			t.Logf("kubectl port-forward: %s", lines.Text())
		}
	}
	if local == "" {
		t.Fatal("kubectl port-forward did not say where it listens")
	}
	go io.Copy(io.Discard, pfOut)
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Get("http://127.0.0.1:" + local + "/")
	if err != nil {
		t.Fatalf("GET through kubectl port-forward: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello from the pod\n" {
		t.Errorf("GET through kubectl port-forward: %q", body)
	}

	// A device the hub has lost, and one whose agent does not answer.
	start := time.Now()
	if out, err := run("", "exec", "far", "--", "echo"); err == nil || !strings.Contains(out, "the device edge-down cannot be reached: its Node is not Ready (NodeStatusUnknown: Kubelet stopped posting node status.)") {
		t.Errorf("exec on a lost device: %q, %v", out, err)
	}
	if out, err := run("", "exec", "lost", "--", "echo"); err == nil || !strings.Contains(out, "the device edge-gone cannot be reached") || !strings.Contains(out, "connection refused") {
		t.Errorf("exec on a device whose agent is down: %q, %v", out, err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the unreachable devices took %s to answer", d)
	}

	// Viewers and devices may not open sessions (kube-apiserver's
	// pods/exec is create or get on the subresource).
	for _, who := range []struct {
		user   string
		groups []string
	}{{"vera", []string{auth.GroupViewers}}, {agentapi.NodeUser("edge-1"), []string{agentapi.NodesGroup}}} {
		certPEM, keyPEM, err := h.PKI().IssueClientCert(who.user, who.groups, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cfg := &rest.Config{Host: h.URL(), TLSClientConfig: rest.TLSClientConfig{CAData: h.PKI().CACertPEM(), CertData: certPEM, KeyData: keyPEM}}
		u, _ := url.Parse(h.URL() + "/api/v1/namespaces/default/pods/web/exec?command=echo&stdout=true")
		for _, mk := range []func() (remotecommand.Executor, error){
			func() (remotecommand.Executor, error) { return remotecommand.NewSPDYExecutor(cfg, "POST", u) },
			func() (remotecommand.Executor, error) {
				return remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
			},
		} {
			e, err := mk()
			if err != nil {
				t.Fatal(err)
			}
			err = e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard})
			if err == nil || !strings.Contains(err.Error(), "forbidden") && !strings.Contains(err.Error(), "403") {
				t.Errorf("%s: exec: %v, want 403", who.user, err)
			}
		}
	}

	// Each session: an entry when it started and one when it ended.
	var started, ended, refused bool
	deadline := time.Now().Add(10 * time.Second)
	for !(started && ended && refused) && time.Now().Before(deadline) {
		es, _ := audit.ReadFile(filepath.Join(h.DataDir, audit.FileName))
		for _, e := range es {
			if e.Subresource != "exec" || e.Name != "web" {
				continue
			}
			admin := e.User == "admin" || slices.Contains(e.Groups, "system:masters")
			echo := e.Container == "app" && slices.Equal(e.Command, []string{"echo", "hi", "there"}) && e.Node == "edge-1"
			switch {
			case admin && echo && e.Stage == "SessionStarted":
				started = true
			case admin && echo && e.Stage == "SessionEnded" && e.Code == http.StatusSwitchingProtocols:
				ended = true
			case e.User == "vera" && e.Code == http.StatusForbidden:
				refused = true
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !started || !ended || !refused {
		es, _ := audit.ReadFile(filepath.Join(h.DataDir, audit.FileName))
		t.Errorf("audit: session started %v, ended %v, viewer refused %v; entries: %+v", started, ended, refused, es)
	}
}
