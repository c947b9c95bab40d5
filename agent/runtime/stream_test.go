package runtime

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestExecStream runs interactive commands in a real container: output
// and exit code, stdin to its end, a terminal (which turns "\n" into
// "\r\n") and its size from a resize.
func TestExecStream(t *testing.T) {
	e := newEnv(t)
	sb := e.sandbox(t, "execstream")
	c := e.run(t, sb, "app", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var out, errOut bytes.Buffer
	code, err := e.rt.ExecStream(ctx, c.ID, []string{"/testapp", "echo", "hi"}, ExecIO{Stdout: &out, Stderr: &errOut})
	if err != nil || code != 0 || out.String() != "hi\n" {
		t.Errorf("echo: %d %q, %v", code, out.String(), err)
	}
	out.Reset()
	code, err = e.rt.ExecStream(ctx, c.ID, []string{"/testapp", "exit", "7"}, ExecIO{Stdout: &out, Stderr: &errOut})
	if err != nil || code != 7 {
		t.Errorf("exit 7: %d, %v", code, err)
	}
	code, err = e.rt.ExecStream(ctx, c.ID, []string{"/testapp", "cat", "/nope"}, ExecIO{Stdout: &out, Stderr: &errOut})
	if err != nil || code != 1 || !strings.Contains(errOut.String(), "no such file") {
		t.Errorf("stderr: %d %q, %v", code, errOut.String(), err)
	}
	out.Reset()
	code, err = e.rt.ExecStream(ctx, c.ID, []string{"/testapp", "cat", "/dev/stdin"}, ExecIO{Stdin: strings.NewReader("line one\nline two\n"), Stdout: &out})
	if err != nil || code != 0 || out.String() != "line one\nline two\n" {
		t.Errorf("stdin: %d %q, %v", code, out.String(), err)
	}
	out.Reset()
	resize := make(chan TermSize, 1)
	resize <- TermSize{Width: 132, Height: 43}
	code, err = e.rt.ExecStream(ctx, c.ID, []string{"/testapp", "winsize"}, ExecIO{Stdout: &out, Stderr: &errOut, TTY: true, Resize: resize})
	close(resize)
	if err != nil || code != 0 || out.String() != "132x43\r\n" {
		t.Errorf("tty: %d %q, %v", code, out.String(), err)
	}
	out.Reset()
	errOut.Reset()
	code, err = e.rt.ExecStream(ctx, c.ID, []string{"/testapp", "winsize"}, ExecIO{Stdout: &out, Stderr: &errOut})
	if err != nil || code != 1 || !strings.Contains(errOut.String(), "not a terminal") {
		t.Errorf("no tty: %d %q %q, %v", code, out.String(), errOut.String(), err)
	}
	// A session that ends kills its command.
	sctx, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	start := time.Now()
	if _, err := e.rt.ExecStream(sctx, c.ID, []string{"/testapp", "sleep", "30s"}, ExecIO{Stdout: io.Discard}); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 20*time.Second {
		t.Errorf("cancelled: %v after %s", err, time.Since(start))
	}
	if _, err := e.rt.ExecStream(ctx, "no-such-container", []string{"/testapp"}, ExecIO{Stdout: io.Discard}); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing container: %v", err)
	}
}

// TestDialPod reaches a server listening on the pod's loopback from the
// host, inside the sandbox's network namespace.
func TestDialPod(t *testing.T) {
	e := newEnv(t)
	e.withNetwork(t, "10.244.93.0/24")
	sb := e.sandbox(t, "dial")
	e.podIP(t, sb)
	e.run(t, sb, "app", func(c *ContainerConfig) { c.Env = append(c.Env, "LISTEN=127.0.0.1:8080") })
	ctx := context.Background()
	eventually(t, "the pod's server answers through DialPod", func() error {
		conn, err := e.rt.DialPod(ctx, sb, 8080)
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(conn, "GET /healthz HTTP/1.0\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /healthz: %s", resp.Status)
		}
		return nil
	})
	if _, err := e.rt.DialPod(ctx, sb, 9); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("closed port: %v", err)
	}
}
