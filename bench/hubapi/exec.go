package hubapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

// ExecResult is the outcome of an exec round-trip run.
type ExecResult struct {
	Execs    int
	P50, P99 time.Duration
}

// ExecRoundTrip runs cmd in container of pod ns/name n times, one after
// another, each a session of its own through the hub to the device's
// agent over WebSocket (kubectl's protocol), and measures each from the
// request to the exit status. Every command must exit 0 with nothing on
// stderr; anything else is an error, not a figure.
func ExecRoundTrip(ctx context.Context, cfg *rest.Config, ns, name, container string, cmd []string, n int) (ExecResult, error) {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = -1, 0
	k, err := kubernetes.NewForConfig(c)
	if err != nil {
		return ExecResult{}, err
	}
	d := make([]time.Duration, n)
	for i := range d {
		req := k.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(name).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
		t0 := time.Now()
		ex, err := remotecommand.NewWebSocketExecutor(c, http.MethodGet, req.URL().String())
		if err != nil {
			return ExecResult{}, err
		}
		var stderr bytes.Buffer
		if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: &stderr}); err != nil {
			return ExecResult{}, fmt.Errorf("exec %d of %v in %s/%s: %w (stderr %q)", i, cmd, ns, name, err, stderr.String())
		}
		d[i] = time.Since(t0)
		if stderr.Len() > 0 {
			return ExecResult{}, fmt.Errorf("exec %d of %v in %s/%s wrote to stderr: %q", i, cmd, ns, name, stderr.String())
		}
	}
	p50, p99 := percentiles(d)
	return ExecResult{Execs: n, P50: p50, P99: p99}, nil
}
