package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run returns the process exit code; main is the only place that exits.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return helper(args, stdout, stderr)
	}
	cfg, err := parseConfig(args, os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "testapp: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	code, err := serve(ctx, cfg, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "testapp: %v\n", err)
	}
	return code
}

type config struct {
	listen        string
	failReadiness bool
	failLiveness  bool
	crashAfter    time.Duration // negative: never
	exitCode      int
	allocMiB      int
	burnCPU       bool
	startDelay    time.Duration
	drainDelay    time.Duration
	ignoreSigterm bool
}

// parseConfig reads flags, falling back to environment variables so that a
// pod manifest can switch behaviours without changing the command.
func parseConfig(args []string, getenv func(string) string) (config, error) {
	fs := flag.NewFlagSet("testapp", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg config
	var crashAfter string
	envStr := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	envBool := func(k string) bool {
		b, _ := strconv.ParseBool(getenv(k))
		return b
	}
	envInt := func(k string, def int) int {
		if n, err := strconv.Atoi(getenv(k)); err == nil {
			return n
		}
		return def
	}
	envDur := func(k string) time.Duration {
		d, _ := time.ParseDuration(getenv(k))
		return d
	}
	fs.StringVar(&cfg.listen, "listen", envStr("LISTEN", ":8080"), "listen address")
	fs.BoolVar(&cfg.failReadiness, "fail-readiness", envBool("FAIL_READINESS"), "answer 503 on /readyz")
	fs.BoolVar(&cfg.failLiveness, "fail-liveness", envBool("FAIL_LIVENESS"), "answer 500 on /healthz")
	fs.StringVar(&crashAfter, "crash-after", getenv("CRASH_AFTER"), "exit after this duration")
	fs.IntVar(&cfg.exitCode, "exit-code", envInt("EXIT_CODE", 1), "exit code when crashing")
	fs.IntVar(&cfg.allocMiB, "alloc-mib", envInt("ALLOC_MIB", 0), "MiB to allocate at start")
	fs.BoolVar(&cfg.burnCPU, "burn-cpu", envBool("BURN_CPU"), "keep one CPU busy until exit")
	fs.DurationVar(&cfg.startDelay, "start-delay", envDur("START_DELAY"), "sleep before listening")
	fs.DurationVar(&cfg.drainDelay, "drain-delay", envDur("DRAIN_DELAY"), "serve this long after SIGTERM")
	fs.BoolVar(&cfg.ignoreSigterm, "ignore-sigterm", envBool("IGNORE_SIGTERM"), "keep running on SIGTERM")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	cfg.crashAfter = -1
	if crashAfter != "" {
		d, err := time.ParseDuration(crashAfter)
		if err != nil {
			return config{}, fmt.Errorf("crash-after %q: %w", crashAfter, err)
		}
		cfg.crashAfter = d
	}
	return cfg, nil
}

// app holds the switches that HTTP calls flip at run time.
type app struct {
	failReady atomic.Bool
	failLive  atomic.Bool
	draining  atomic.Bool
	exit      chan int // a requested exit code
	mu        sync.Mutex
	ballast   [][]byte
	out       io.Writer
}

func newApp(cfg config, out io.Writer) *app {
	a := &app{exit: make(chan int, 1), out: out}
	a.failReady.Store(cfg.failReadiness)
	a.failLive.Store(cfg.failLiveness)
	return a
}

// burn keeps one CPU busy until ctx ends, for tests of CPU usage.
func burn(ctx context.Context) {
	for n := 0; ctx.Err() == nil; n++ {
		for i := 0; i < 1e6; i++ {
			n ^= i
		}
	}
}

// alloc touches every page so that the memory is resident and counted
// against the cgroup limit, which is what OOM tests need.
func (a *app) alloc(mib int) {
	buf := make([]byte, mib<<20)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	a.mu.Lock()
	a.ballast = append(a.ballast, buf)
	a.mu.Unlock()
}

func (a *app) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if a.failLive.Load() {
			http.Error(w, "liveness failing", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if a.failReady.Load() || a.draining.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		host, _ := os.Hostname()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"hostname":     host,
			"podName":      os.Getenv("POD_NAME"),
			"podNamespace": os.Getenv("POD_NAMESPACE"),
			"method":       r.Method,
			"path":         r.URL.Path,
			"remoteAddr":   r.RemoteAddr,
			"host":         r.Host,
			"headers":      r.Header,
		})
	})
	mux.HandleFunc("GET /env", func(w http.ResponseWriter, r *http.Request) {
		env := os.Environ()
		sort.Strings(env)
		io.WriteString(w, strings.Join(env, "\n")+"\n")
	})
	mux.HandleFunc("GET /file", func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile(r.URL.Query().Get("path"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		w.Write(b)
	})
	mux.HandleFunc("GET /ls", func(w http.ResponseWriter, r *http.Request) {
		ents, err := os.ReadDir(r.URL.Query().Get("path"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		for _, e := range ents {
			info, err := e.Info()
			if err != nil {
				continue
			}
			fmt.Fprintf(w, "%s %s %d\n", info.Mode(), e.Name(), info.Size())
		}
	})
	mux.HandleFunc("GET /sleep", func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("d"))
		if err != nil {
			http.Error(w, "d: "+err.Error(), http.StatusBadRequest)
			return
		}
		time.Sleep(d)
		fmt.Fprintf(w, "slept %s\n", d)
	})
	setSwitch := func(b *atomic.Bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			on, err := strconv.ParseBool(r.URL.Query().Get("on"))
			if err != nil {
				http.Error(w, "on must be true or false", http.StatusBadRequest)
				return
			}
			b.Store(on)
			fmt.Fprintf(w, "%v\n", on)
		}
	}
	mux.HandleFunc("POST /fail/readiness", setSwitch(&a.failReady))
	mux.HandleFunc("POST /fail/liveness", setSwitch(&a.failLive))
	mux.HandleFunc("POST /crash", func(w http.ResponseWriter, r *http.Request) {
		code, err := strconv.Atoi(r.URL.Query().Get("code"))
		if err != nil {
			http.Error(w, "code must be an integer", http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "exiting %d\n", code)
		select {
		case a.exit <- code:
		default:
		}
	})
	mux.HandleFunc("POST /alloc", func(w http.ResponseWriter, r *http.Request) {
		mib, err := strconv.Atoi(r.URL.Query().Get("mib"))
		if err != nil || mib < 0 {
			http.Error(w, "mib must be a non-negative integer", http.StatusBadRequest)
			return
		}
		a.alloc(mib)
		fmt.Fprintf(w, "allocated %d MiB\n", mib)
	})
	return mux
}

// serve runs the server until a crash is requested or a signal ends ctx;
// it returns the exit code.
func serve(ctx context.Context, cfg config, out io.Writer) (int, error) {
	fmt.Fprintf(out, "testapp: starting (pid %d)\n", os.Getpid())
	a := newApp(cfg, out)
	if cfg.startDelay > 0 {
		time.Sleep(cfg.startDelay)
	}
	if cfg.allocMiB > 0 {
		a.alloc(cfg.allocMiB)
		fmt.Fprintf(out, "testapp: allocated %d MiB\n", cfg.allocMiB)
	}
	if cfg.burnCPU {
		go burn(ctx)
		fmt.Fprintln(out, "testapp: burning a CPU")
	}
	if cfg.crashAfter >= 0 {
		time.AfterFunc(cfg.crashAfter, func() { a.exit <- cfg.exitCode })
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return 1, err
	}
	srv := &http.Server{Handler: a.handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(out, "testapp: listening on %s\n", ln.Addr())

	for {
		select {
		case code := <-a.exit:
			// Give the answer to /crash a moment to leave before the exit.
			time.Sleep(50 * time.Millisecond)
			fmt.Fprintf(out, "testapp: exiting with code %d\n", code)
			return code, nil
		case err := <-served:
			return 1, err
		case <-ctx.Done():
			fmt.Fprintln(out, "testapp: SIGTERM")
			if cfg.ignoreSigterm {
				fmt.Fprintln(out, "testapp: ignoring SIGTERM")
				ctx = context.Background()
				continue
			}
			a.draining.Store(true)
			time.Sleep(cfg.drainDelay)
			sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return 1, err
			}
			fmt.Fprintln(out, "testapp: drained, exiting 0")
			return 0, nil
		}
	}
}

// helper runs the small commands that exec probes and hooks use.
func helper(args []string, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "testapp %s: %s\n", args[0], fmt.Sprintf(format, a...))
		return 1
	}
	need := func(n int) bool { return len(args) >= n+1 }
	switch args[0] {
	case "exit":
		if !need(1) {
			return fail("usage: exit N")
		}
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return fail("%v", err)
		}
		return n
	case "cat":
		if !need(1) {
			return fail("usage: cat FILE")
		}
		b, err := os.ReadFile(args[1])
		if err != nil {
			return fail("%v", err)
		}
		stdout.Write(b)
		return 0
	case "append":
		if !need(2) {
			return fail("usage: append FILE TEXT")
		}
		f, err := os.OpenFile(args[1], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return fail("%v", err)
		}
		_, err = fmt.Fprintln(f, strings.Join(args[2:], " "))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fail("%v", err)
		}
		return 0
	case "echo":
		fmt.Fprintln(stdout, strings.Join(args[1:], " "))
		return 0
	case "relay":
		// relay: each line of stdin back as "got LINE" (stdout) as it
		// comes, for attach; "stdin closed" at its end.
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			fmt.Fprintf(stdout, "got %s\n", sc.Text())
		}
		fmt.Fprintln(stdout, "stdin closed")
		return 0
	case "winsize":
		// winsize: the size of the terminal on stdin, once it has one
		// (an exec's first resize may come after the start).
		for range 100 {
			ws, err := unix.IoctlGetWinsize(0, unix.TIOCGWINSZ)
			if err != nil {
				return fail("stdin is not a terminal: %v", err)
			}
			if ws.Col != 0 {
				fmt.Fprintf(stdout, "%dx%d\n", ws.Col, ws.Row)
				return 0
			}
			time.Sleep(50 * time.Millisecond)
		}
		return fail("the terminal has no size after 5s")
	case "sleep":
		// sleep DURATION [EXIT]: a Job's pod that ends with EXIT after a
		// while.
		if !need(1) {
			return fail("usage: sleep DURATION [EXIT]")
		}
		d, err := time.ParseDuration(args[1])
		if err != nil {
			return fail("%v", err)
		}
		code := 0
		if need(2) {
			if code, err = strconv.Atoi(args[2]); err != nil {
				return fail("%v", err)
			}
		}
		time.Sleep(d)
		return code
	case "get":
		if !need(1) {
			return fail("usage: get URL")
		}
		c := &http.Client{Timeout: 10 * time.Second}
		resp, err := c.Get(args[1])
		if err != nil {
			return fail("%v", err)
		}
		defer resp.Body.Close()
		io.Copy(stdout, resp.Body)
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return fail("status %s", resp.Status)
		}
		return 0
	default:
		return fail("unknown command; want one of exit, cat, append, echo, sleep, get, or flags for server mode")
	}
}
