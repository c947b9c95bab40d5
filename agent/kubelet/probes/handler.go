package probes

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"flotilla.dev/flotilla/agent/runtime"
)

// Result is a probe's verdict.
type Result int

const (
	Unknown Result = iota
	Success
	Failure
)

func (r Result) String() string {
	switch r {
	case Success:
		return "success"
	case Failure:
		return "failure"
	}
	return "unknown"
}

// Execer runs a command in a running container (runtime.Runtime does).
type Execer interface {
	Exec(ctx context.Context, id string, argv []string, timeout time.Duration) (runtime.ExecResult, error)
}

// DialFunc opens connections; the kubelet's dials from the device's
// network namespace, where pod IPs are routed.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Target is the container a probe or hook acts on.
type Target struct {
	// PodIP is the default host of httpGet, tcpSocket and grpc actions.
	PodIP string
	// ContainerID is the runtime's ID, for exec.
	ContainerID string
	// Ports resolve named ports.
	Ports []corev1.ContainerPort
}

// Runner executes probe and lifecycle handlers.
type Runner struct {
	Exec Execer
	Dial DialFunc
}

// maxOutput bounds what a probe's output contributes to messages.
const maxOutput = 10 << 10

// Probe runs one probe handler within timeout. Errors (a refused
// connection, a timeout) are failures whose message says what happened.
func (r *Runner) Probe(ctx context.Context, h *corev1.ProbeHandler, t Target, timeout time.Duration) (Result, string) {
	switch {
	case h.Exec != nil:
		return r.exec(ctx, h.Exec.Command, t, timeout)
	case h.HTTPGet != nil:
		return r.httpGet(ctx, h.HTTPGet, t, timeout)
	case h.TCPSocket != nil:
		return r.tcp(ctx, h.TCPSocket, t, timeout)
	case h.GRPC != nil:
		return r.grpc(ctx, h.GRPC, t, timeout)
	}
	return Failure, "probe has no handler (exec, httpGet, tcpSocket or grpc)"
}

// Hook runs a lifecycle handler (postStart, preStop) and returns an error
// with Kubernetes' wording when it fails.
func (r *Runner) Hook(ctx context.Context, h *corev1.LifecycleHandler, t Target, timeout time.Duration) error {
	switch {
	case h.Exec != nil:
		if res, msg := r.exec(ctx, h.Exec.Command, t, timeout); res != Success {
			return fmt.Errorf("Exec lifecycle hook (%s) for Container %s failed - error: %s", strings.Join(h.Exec.Command, " "), t.ContainerID, msg)
		}
	case h.HTTPGet != nil:
		if res, msg := r.httpGet(ctx, h.HTTPGet, t, timeout); res != Success {
			return fmt.Errorf("HTTP lifecycle hook (%s) for Container %s failed - error: %s", h.HTTPGet.Path, t.ContainerID, msg)
		}
	case h.TCPSocket != nil:
		return errors.New("tcpSocket lifecycle handlers are deprecated and not supported")
	case h.Sleep != nil:
		d := time.Duration(h.Sleep.Seconds) * time.Second
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	default:
		return errors.New("lifecycle hook has no handler")
	}
	return nil
}

func (r *Runner) exec(ctx context.Context, argv []string, t Target, timeout time.Duration) (Result, string) {
	if r.Exec == nil {
		return Failure, "exec is not available"
	}
	res, err := r.Exec.Exec(ctx, t.ContainerID, argv, timeout)
	if errors.Is(err, runtime.ErrExecTimeout) {
		return Failure, fmt.Sprintf("command %q timed out", strings.Join(argv, " "))
	}
	if err != nil {
		return Failure, err.Error()
	}
	out := string(res.Output)
	if len(out) > maxOutput {
		out = out[:maxOutput]
	}
	if res.ExitCode != 0 {
		if out == "" {
			return Failure, fmt.Sprintf("command %q exited with %d", strings.Join(argv, " "), res.ExitCode)
		}
		return Failure, out
	}
	return Success, out
}

// ResolvePort turns a probe's port (number or container port name) into
// a number.
func ResolvePort(p intstr.IntOrString, ports []corev1.ContainerPort) (int, error) {
	if p.Type == intstr.Int {
		if p.IntVal <= 0 || p.IntVal > 65535 {
			return 0, fmt.Errorf("invalid port number: %d", p.IntVal)
		}
		return int(p.IntVal), nil
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return ResolvePort(intstr.FromInt32(int32(n)), ports)
	}
	for _, cp := range ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("couldn't find port %q in the container's ports", p.StrVal)
}

func (r *Runner) dialer() DialFunc {
	if r.Dial != nil {
		return r.Dial
	}
	return (&net.Dialer{}).DialContext
}

func (r *Runner) httpGet(ctx context.Context, a *corev1.HTTPGetAction, t Target, timeout time.Duration) (Result, string) {
	port, err := ResolvePort(a.Port, t.Ports)
	if err != nil {
		return Failure, err.Error()
	}
	host := a.Host
	if host == "" {
		host = t.PodIP
	}
	scheme := strings.ToLower(string(a.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	path := a.Path
	if path == "" || path[0] != '/' {
		path = "/" + path
	}
	u, err := url.Parse(scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + path)
	if err != nil {
		return Failure, err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return Failure, err.Error()
	}
	req.Header.Set("User-Agent", "kube-probe/flotilla")
	req.Header.Set("Accept", "*/*")
	for _, h := range a.HTTPHeaders {
		if strings.EqualFold(h.Name, "Host") {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	client := &http.Client{
		Transport: &http.Transport{
			DialContext:       r.dialer(),
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
			DisableKeepAlives: true,
		},
		// Follow redirects to the same host only; a redirect elsewhere
		// counts as success, as in Kubernetes.
		CheckRedirect: func(next *http.Request, via []*http.Request) error {
			if next.URL.Hostname() != u.Hostname() || len(via) >= 10 {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}
	resp, err := client.Do(req)
	if err != nil {
		return Failure, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxOutput))
	if resp.StatusCode >= 200 && resp.StatusCode < 400 {
		return Success, string(body)
	}
	return Failure, fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode)
}

func (r *Runner) tcp(ctx context.Context, a *corev1.TCPSocketAction, t Target, timeout time.Duration) (Result, string) {
	port, err := ResolvePort(a.Port, t.Ports)
	if err != nil {
		return Failure, err.Error()
	}
	host := a.Host
	if host == "" {
		host = t.PodIP
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := r.dialer()(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return Failure, err.Error()
	}
	c.Close()
	return Success, ""
}

func (r *Runner) grpc(ctx context.Context, a *corev1.GRPCAction, t Target, timeout time.Duration) (Result, string) {
	if a.Port <= 0 || a.Port > 65535 {
		return Failure, fmt.Sprintf("invalid port number: %d", a.Port)
	}
	addr := net.JoinHostPort(t.PodIP, strconv.Itoa(int(a.Port)))
	dial := r.dialer()
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, s string) (net.Conn, error) { return dial(ctx, "tcp", s) }),
		grpc.WithUserAgent("kube-probe/flotilla"),
	)
	if err != nil {
		return Failure, err.Error()
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	service := ""
	if a.Service != nil {
		service = *a.Service
	}
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return Failure, fmt.Sprintf("failed to connect service %q within %s: %v", addr, timeout, err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return Failure, fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus())
	}
	return Success, ""
}
