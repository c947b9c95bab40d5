package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/httpstream"
	rcconst "k8s.io/apimachinery/pkg/util/remotecommand"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/client-go/util/exec"

	"flotilla.dev/flotilla/internal/testlog"
)

// fakeStreamer runs a few commands of its own and dials a local server
// for every port but 9.
type fakeStreamer struct {
	target string // host:port DialPod connects to
	mu     sync.Mutex
	seen   []ContainerRef
}

func (f *fakeStreamer) Exec(ctx context.Context, ref ContainerRef, cmd []string, s Streams) (int, error) {
	f.mu.Lock()
	f.seen = append(f.seen, ref)
	f.mu.Unlock()
	if ref.Container == "gone" {
		return 0, fmt.Errorf("%w: container gone is not running in pod %s/%s", ErrNotFound, ref.Namespace, ref.Pod)
	}
	switch cmd[0] {
	case "echo":
		fmt.Fprintf(s.Stdout, "%s tty=%v\n", strings.Join(cmd[1:], " "), s.TTY)
	case "cat":
		io.Copy(s.Stdout, s.Stdin)
	case "fail":
		io.WriteString(s.Stderr, "oops\n")
		return 3, nil
	case "size":
		select {
		case sz := <-s.Resize:
			fmt.Fprintf(s.Stdout, "%dx%d\n", sz.Width, sz.Height)
		case <-ctx.Done():
			return 1, ctx.Err()
		}
	}
	return 0, nil
}

// AttachMode: "shell" has stdin, "term" stdin and a TTY, "gone" is not
// running, any other container has neither (attach follows its log).
func (f *fakeStreamer) AttachMode(ctx context.Context, ref ContainerRef) (AttachMode, error) {
	switch ref.Container {
	case "gone":
		return AttachMode{}, fmt.Errorf("%w: container gone is not running in pod %s/%s", ErrNotFound, ref.Namespace, ref.Pod)
	case "shell":
		return AttachMode{Stdin: true}, nil
	case "term":
		return AttachMode{Stdin: true, TTY: true}, nil
	}
	return AttachMode{}, nil
}

// Attach echoes stdin back as "got LINE"; on a terminal it first
// reports the first size. It reads stdin all along, as a container's
// attach does: over a websocket, a frame of stdin no one reads holds up
// the frames behind it, the terminal's size among them.
func (f *fakeStreamer) Attach(ctx context.Context, ref ContainerRef, s Streams) error {
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(s.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	if ref.Container == "term" {
		if !s.TTY || s.Stderr != nil {
			return fmt.Errorf("a terminal session with tty=%v and stderr %v", s.TTY, s.Stderr)
		}
		select {
		case sz := <-s.Resize:
			fmt.Fprintf(s.Stdout, "%dx%d\n", sz.Width, sz.Height)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for l := range lines {
		fmt.Fprintf(s.Stdout, "got %s\n", l)
	}
	return nil
}

func (f *fakeStreamer) DialPod(ctx context.Context, ns, pod string, port uint16) (net.Conn, error) {
	if port == 9 {
		return nil, errors.New("connection refused")
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", f.target)
}

// startStreamingServer runs an agent server with fs and returns a client
// config with the hub's admin identity.
func startStreamingServer(t *testing.T, fs *fakeStreamer) *restclient.Config {
	t.Helper()
	hubCA := newPKI(t)
	cert, err := LoadOrCreateServingCert(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Listen: "127.0.0.1:0", LogDir: t.TempDir(), Certificate: cert, ClientCAs: hubCA.CAPool(), Streamer: fs, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	certPEM, keyPEM := hubCA.AdminCredentials()
	return &restclient.Config{
		Host:            "https://" + s.Addr().String(),
		TLSClientConfig: restclient.TLSClientConfig{Insecure: true, CertData: certPEM, KeyData: keyPEM},
	}
}

type executorFunc func(t *testing.T, cfg *restclient.Config, u *url.URL) remotecommand.Executor

func spdyExecutor(t *testing.T, cfg *restclient.Config, u *url.URL) remotecommand.Executor {
	e, err := remotecommand.NewSPDYExecutor(cfg, "POST", u)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func wsExecutor(protocols ...string) executorFunc {
	return func(t *testing.T, cfg *restclient.Config, u *url.URL) remotecommand.Executor {
		e, err := remotecommand.NewWebSocketExecutorForProtocols(cfg, "GET", u.String(), protocols...)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
}

func fallbackExecutor(t *testing.T, cfg *restclient.Config, u *url.URL) remotecommand.Executor {
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
	if err != nil {
		t.Fatal(err)
	}
	e, err := remotecommand.NewFallbackExecutor(ws, spdyExecutor(t, cfg, u), func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

type sizes struct {
	c chan *remotecommand.TerminalSize
}

func (s sizes) Next() *remotecommand.TerminalSize { return <-s.c }

// TestExecProtocols runs commands with client-go's executors over each
// protocol: output, stdin to its end, a TTY and its resizes, the exit
// code, and a container that is not running.
func TestExecProtocols(t *testing.T) {
	fs := &fakeStreamer{}
	cfg := startStreamingServer(t, fs)
	execURL := func(container string, q string) *url.URL {
		u, _ := url.Parse(cfg.Host + "/exec/default/web/" + container + "?" + q)
		return u
	}
	for name, mk := range map[string]executorFunc{
		"spdy":         spdyExecutor,
		"websocket-v5": wsExecutor(rcconst.StreamProtocolV5Name),
		"websocket-v4": wsExecutor(rcconst.StreamProtocolV4Name),
		"fallback":     fallbackExecutor,
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			run := func(q string, opts remotecommand.StreamOptions) (string, string, error) {
				var out, errOut bytes.Buffer
				if opts.Stdout == nil {
					opts.Stdout = &out
				}
				opts.Stderr = &errOut
				if opts.Tty {
					opts.Stderr = nil
				}
				err := mk(t, cfg, execURL("app", q)).StreamWithContext(ctx, opts)
				return out.String(), errOut.String(), err
			}
			// kube-apiserver's names for the kubelet, and PodExecOptions'.
			if out, _, err := run("command=echo&command=hi&command=there&output=1&error=1", remotecommand.StreamOptions{}); err != nil || out != "hi there tty=false\n" {
				t.Errorf("echo: %q, %v", out, err)
			}
			// v4 over WebSocket cannot say that stdin has ended (v5's close
			// signal can), so the command would wait for ever.
			if name != "websocket-v4" {
				if out, _, err := run("command=cat&stdin=true&stdout=true&stderr=true", remotecommand.StreamOptions{Stdin: strings.NewReader("from stdin\n")}); err != nil || out != "from stdin\n" {
					t.Errorf("cat: %q, %v", out, err)
				}
			}
			_, errOut, err := run("command=fail&output=1&error=1", remotecommand.StreamOptions{})
			var code utilexec.CodeExitError
			if !errors.As(err, &code) || code.Code != 3 || errOut != "oops\n" {
				t.Errorf("fail: stderr %q, %v (%T); want exit code 3", errOut, err, err)
			}
			q := make(chan *remotecommand.TerminalSize, 1)
			q <- &remotecommand.TerminalSize{Width: 120, Height: 40}
			if out, _, err := run("command=size&input=1&output=1&tty=1", remotecommand.StreamOptions{Stdin: strings.NewReader(""), Tty: true, TerminalSizeQueue: sizes{q}}); err != nil || out != "120x40\n" {
				t.Errorf("tty resize: %q, %v", out, err)
			}
			err = mk(t, cfg, execURL("gone", "command=echo&output=1")).StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard})
			if err == nil || !strings.Contains(err.Error(), "container gone is not running in pod default/web") {
				t.Errorf("not running: %v", err)
			}
		})
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.seen) == 0 || fs.seen[0] != (ContainerRef{"default", "web", "app"}) {
		t.Errorf("the streamer was asked for %v", fs.seen)
	}
}

// TestExecRefusals: bad requests are answered before any upgrade.
func TestExecRefusals(t *testing.T) {
	cfg := startStreamingServer(t, &fakeStreamer{})
	for _, tc := range []struct{ path, want string }{
		{"/exec/default/web/app?output=1", "no command"},
		{"/exec/default/web/app?command=ls", "at least 1 of stdin, stdout, stderr"},
		{"/exec/default/web/app?command=ls&output=maybe", `output="maybe"`},
		{"/exec/default/Web_/app?command=ls&output=1", "pod"},
		{"/attach/default/web/app?input=1&output=1", "container app in pod default/web does not have stdin enabled"},
		{"/attach/default/web/gone?output=1", "container gone is not running"},
	} {
		u, _ := url.Parse(cfg.Host + tc.path)
		err := spdyExecutor(t, cfg, u).StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: io.Discard})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.path, err, tc.want)
		}
	}
}

// TestAttachWithStdin attaches to containers started with stdin (and a
// terminal) with client-go's executors over each protocol: stdin reaches
// the streamer, its output comes back, a terminal gets its size.
func TestAttachWithStdin(t *testing.T) {
	cfg := startStreamingServer(t, &fakeStreamer{})
	for name, mk := range map[string]executorFunc{
		"spdy":         spdyExecutor,
		"websocket-v5": wsExecutor(rcconst.StreamProtocolV5Name),
		"fallback":     fallbackExecutor,
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			u, _ := url.Parse(cfg.Host + "/attach/default/web/shell?input=1&output=1&error=1")
			var out, errOut bytes.Buffer
			err := mk(t, cfg, u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("one\ntwo\n"), Stdout: &out, Stderr: &errOut})
			if err != nil || out.String() != "got one\ngot two\n" {
				t.Errorf("attach -i: %q, %v", out.String(), err)
			}
			u, _ = url.Parse(cfg.Host + "/attach/default/web/term?input=1&output=1&tty=1")
			out.Reset()
			q := make(chan *remotecommand.TerminalSize, 1)
			q <- &remotecommand.TerminalSize{Width: 100, Height: 30}
			err = mk(t, cfg, u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("x\n"), Stdout: &out, Tty: true, TerminalSizeQueue: sizes{q}})
			if err != nil || out.String() != "100x30\ngot x\n" {
				t.Errorf("attach -it: %q, %v", out.String(), err)
			}
		})
	}
}

// TestAttachFollowsTheLog: attach streams what the container writes to
// its log from then on.
func TestAttachFollowsTheLog(t *testing.T) {
	hubCA := newPKI(t)
	dir := t.TempDir()
	d := podLogs(t, dir, "default", "web", "u1", "app")
	logFile := filepath.Join(d, "0.log")
	write(t, logFile, criLine(0, "stdout", "F", "before attach"))
	cert, _ := LoadOrCreateServingCert(t.TempDir(), []string{"127.0.0.1"})
	s, err := New(Config{Listen: "127.0.0.1:0", LogDir: dir, Certificate: cert, ClientCAs: hubCA.CAPool(), Streamer: &fakeStreamer{}, Poll: 10 * time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	certPEM, keyPEM := hubCA.AdminCredentials()
	cfg := &restclient.Config{Host: "https://" + s.Addr().String(), TLSClientConfig: restclient.TLSClientConfig{Insecure: true, CertData: certPEM, KeyData: keyPEM}}
	u, _ := url.Parse(cfg.Host + "/attach/default/web/app?output=1&error=1")
	pr, pw := io.Pipe()
	sctx, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	errc := make(chan error, 1)
	go func() {
		errc <- wsExecutor(rcconst.StreamProtocolV5Name)(t, cfg, u).StreamWithContext(sctx, remotecommand.StreamOptions{Stdout: pw, Stderr: pw})
	}()
	lines := bufio.NewReader(pr)
	go func() {
		// Appended until the attach has seen it.
		for i := 0; sctx.Err() == nil; i++ {
			f, err := os.OpenFile(logFile, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return
			}
			f.WriteString(criLine(i+1, "stderr", "F", "after attach"))
			f.Close()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	line, err := lines.ReadString('\n')
	if err != nil || line != "after attach\n" {
		t.Errorf("attach: %q, %v; want the lines written after it, not before", line, err)
	}
	stop()
	<-errc
}

// TestPortForwardProtocols forwards to a server over SPDY, over SPDY
// tunneled in a WebSocket, and through client-go's fallback dialer, and
// reports a port that refuses.
func TestPortForwardProtocols(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				io.WriteString(c, "pod says "+line)
			}()
		}
	}()
	// client-go reports a forwarded connection's error through
	// HandleError, not to the forwarder's error writer.
	var errOut testlog.Buffer
	saved := utilruntime.ErrorHandlers
	utilruntime.ErrorHandlers = append(saved[:len(saved):len(saved)], func(_ context.Context, err error, _ string, _ ...any) {
		io.WriteString(&errOut, err.Error()+"\n")
	})
	defer func() { utilruntime.ErrorHandlers = saved }()
	cfg := startStreamingServer(t, &fakeStreamer{target: ln.Addr().String()})
	u, _ := url.Parse(cfg.Host + "/portForward/default/web")
	spdyDialer := func(t *testing.T) httpstream.Dialer {
		tr, up, err := spdy.RoundTripperFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return spdy.NewDialer(up, &http.Client{Transport: tr}, "POST", u)
	}
	tunnel := func(t *testing.T) httpstream.Dialer {
		d, err := portforward.NewSPDYOverWebsocketDialer(u, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for name, mk := range map[string]func(*testing.T) httpstream.Dialer{
		"spdy":      spdyDialer,
		"websocket": tunnel,
		"fallback": func(t *testing.T) httpstream.Dialer {
			return portforward.NewFallbackDialer(tunnel(t), spdyDialer(t), func(err error) bool {
				return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
			})
		},
	} {
		t.Run(name, func(t *testing.T) {
			stopc, ready := make(chan struct{}), make(chan struct{})
			fw, err := portforward.NewOnAddresses(mk(t), []string{"127.0.0.1"}, []string{"0:8080", "0:9"}, stopc, ready, io.Discard, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- fw.ForwardPorts() }()
			defer close(stopc)
			defer func() {
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Error("the forward did not stop")
				}
			}()
			select {
			case <-ready:
			case err := <-done:
				done <- err
				t.Fatalf("forwarding: %v", err)
			case <-time.After(20 * time.Second):
				t.Fatal("not ready after 20s")
			}
			ports, _ := fw.GetPorts()
			for i := range 2 { // two connections, one after the other
				c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0].Local))
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(c, "hello %d\n", i)
				c.SetDeadline(time.Now().Add(10 * time.Second))
				got, err := bufio.NewReader(c).ReadString('\n')
				c.Close()
				if want := fmt.Sprintf("pod says hello %d\n", i); got != want {
					t.Errorf("through the forward: %q, %v; want %q", got, err, want)
				}
			}
			// A refused port is reported on the error stream.
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[1].Local))
			if err != nil {
				t.Fatal(err)
			}
			io.ReadAll(c)
			c.Close()
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(errOut.String(), "error forwarding port 9 to pod default/web: connection refused") && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if !strings.Contains(errOut.String(), "error forwarding port 9 to pod default/web: connection refused") {
				t.Errorf("refused port: client said %q", errOut.String())
			}
		})
	}
}
