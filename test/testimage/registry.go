package testimage

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"flotilla.dev/flotilla/internal/testenv"
)

// RegistryBinary is Debian's build of the distribution registry.
const RegistryBinary = "docker-registry"

// Registry is a docker-registry process serving plain HTTP on loopback.
type Registry struct {
	// Host is "127.0.0.1:PORT", the registry part of image references.
	Host string

	cmd    *exec.Cmd
	exited chan struct{}
	out    *bytes.Buffer
}

// URL is the registry's base URL.
func (r *Registry) URL() string { return "http://" + r.Host }

// StartRegistry starts a registry private to the test, storing into a test
// temp dir; it stops at test cleanup. The test skips when docker-registry is
// not installed.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	bin := registryBinary(t)
	dir := t.TempDir()
	storage := fmt.Sprintf("filesystem:\n    rootdirectory: %s", filepath.Join(dir, "data"))
	r, err := start(bin, dir, storage)
	if err != nil {
		t.Fatalf("testimage: %v", err)
	}
	t.Cleanup(r.stop)
	return r
}

var shared struct {
	once sync.Once
	reg  *Registry
	err  error
}

// SharedRegistry returns the registry shared by every test of this process,
// starting it on first use. It keeps blobs in memory and dies with the test
// process.
func SharedRegistry(t testing.TB) *Registry {
	t.Helper()
	bin := registryBinary(t)
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "flotilla-registry-")
		if err != nil {
			shared.err = err
			return
		}
		// The registry reads its config once at start; the dir can go then.
		defer os.RemoveAll(dir)
		shared.reg, shared.err = start(bin, dir, "inmemory: {}")
	})
	if shared.err != nil {
		t.Fatalf("testimage: shared registry: %v", shared.err)
	}
	return shared.reg
}

func registryBinary(t testing.TB) string {
	t.Helper()
	testenv.Integration(t, "starts "+RegistryBinary)
	return testenv.RequireTool(t, RegistryBinary, "apt-get install docker-registry, or run scripts/install-deps.sh")
}

// start runs the registry on a free loopback port, retrying when another
// process takes the port between our probe and the registry's bind.
func start(bin, dir, storage string) (*Registry, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		r, err := startOn(bin, dir, storage, port)
		if err == nil {
			return r, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func startOn(bin, dir, storage string, port int) (*Registry, error) {
	host := fmt.Sprintf("127.0.0.1:%d", port)
	conf := filepath.Join(dir, fmt.Sprintf("config-%d.yml", port))
	body := fmt.Sprintf(`version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  %s
  delete:
    enabled: true
http:
  addr: %s
`, storage, host)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		return nil, err
	}
	r := &Registry{Host: host, exited: make(chan struct{}), out: &bytes.Buffer{}}
	r.cmd = exec.Command(bin, "serve", conf)
	r.cmd.Stdout = &lockedWriter{w: r.out}
	r.cmd.Stderr = r.cmd.Stdout
	// The kernel kills the registry when the thread that started it ends;
	// that thread stays locked until the registry exits, so in effect the
	// registry never outlives the test process.
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		if err := r.cmd.Start(); err != nil {
			started <- err
			close(r.exited)
			return
		}
		started <- nil
		r.cmd.Wait()
		close(r.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	if err := r.waitReady(10 * time.Second); err != nil {
		r.stop()
		return nil, err
	}
	return r, nil
}

func (r *Registry) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-r.exited:
			return fmt.Errorf("docker-registry on %s exited at start: %s", r.Host, r.output())
		default:
		}
		resp, err := c.Get(r.URL() + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("docker-registry on %s not ready after %s: %s", r.Host, timeout, r.output())
}

func (r *Registry) output() string {
	lw := r.cmd.Stdout.(*lockedWriter)
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return r.out.String()
}

func (r *Registry) stop() {
	if r.cmd.Process != nil {
		if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			r.cmd.Process.Kill()
		}
	}
	select {
	case <-r.exited:
	case <-time.After(5 * time.Second):
		r.cmd.Process.Kill()
		<-r.exited
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w.Len() > 64<<10 { // keep only the start: it says why a start failed
		return len(p), nil
	}
	return l.w.Write(p)
}
