package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"flotilla.dev/flotilla/internal/testlog"
)

func TestParseConfigFlagsOverEnv(t *testing.T) {
	env := map[string]string{"LISTEN": ":9000", "FAIL_READINESS": "true", "EXIT_CODE": "7", "CRASH_AFTER": "3s", "ALLOC_MIB": "5"}
	cfg, err := parseConfig([]string{"-exit-code", "9"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.listen != ":9000" || !cfg.failReadiness || cfg.exitCode != 9 || cfg.crashAfter != 3*time.Second || cfg.allocMiB != 5 {
		t.Fatalf("config = %+v", cfg)
	}
	cfg, err = parseConfig(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.crashAfter >= 0 || cfg.listen != ":8080" || cfg.exitCode != 1 {
		t.Fatalf("defaults = %+v", cfg)
	}
	if _, err := parseConfig([]string{"-crash-after", "soon"}, func(string) string { return "" }); err == nil {
		t.Fatal("bad duration accepted")
	}
}

func get(t *testing.T, srv *httptest.Server, method, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	a := newApp(config{}, io.Discard)
	srv := httptest.NewServer(a.handler())
	defer srv.Close()

	if code, _ := get(t, srv, "GET", "/healthz"); code != 200 {
		t.Fatalf("healthz = %d", code)
	}
	if code, _ := get(t, srv, "POST", "/fail/liveness?on=true"); code != 200 {
		t.Fatalf("fail liveness = %d", code)
	}
	if code, _ := get(t, srv, "GET", "/healthz"); code != 500 {
		t.Fatalf("healthz after fail = %d", code)
	}
	if code, _ := get(t, srv, "POST", "/fail/readiness?on=true"); code != 200 {
		t.Fatal("fail readiness")
	}
	if code, _ := get(t, srv, "GET", "/readyz"); code != 503 {
		t.Fatalf("readyz after fail = %d", code)
	}
	get(t, srv, "POST", "/fail/readiness?on=false")
	if code, _ := get(t, srv, "GET", "/readyz"); code != 200 {
		t.Fatalf("readyz after recover = %d", code)
	}
	if code, _ := get(t, srv, "POST", "/fail/readiness?on=maybe"); code != 400 {
		t.Fatalf("bad switch = %d", code)
	}

	t.Setenv("POD_NAME", "web-1")
	code, body := get(t, srv, "GET", "/")
	var info map[string]any
	if err := json.Unmarshal([]byte(body), &info); err != nil || code != 200 {
		t.Fatalf("/ = %d %q: %v", code, body, err)
	}
	if info["podName"] != "web-1" || info["path"] != "/" {
		t.Fatalf("/ = %v", info)
	}

	t.Setenv("TESTAPP_PROBE", "x=y")
	if _, body := get(t, srv, "GET", "/env"); !strings.Contains(body, "TESTAPP_PROBE=x=y\n") {
		t.Fatalf("/env = %q", body)
	}
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, []byte("content"), 0o600)
	if code, body := get(t, srv, "GET", "/file?path="+p); code != 200 || body != "content" {
		t.Fatalf("/file = %d %q", code, body)
	}
	if code, _ := get(t, srv, "GET", "/file?path=/does/not/exist"); code != 404 {
		t.Fatalf("/file missing = %d", code)
	}
	if code, body := get(t, srv, "GET", "/ls?path="+filepath.Dir(p)); code != 200 || !strings.Contains(body, " f 7") {
		t.Fatalf("/ls = %d %q", code, body)
	}
	if code, _ := get(t, srv, "POST", "/alloc?mib=2"); code != 200 || len(a.ballast) != 1 || len(a.ballast[0]) != 2<<20 {
		t.Fatalf("alloc = %d", code)
	}
	if code, _ := get(t, srv, "POST", "/crash?code=4"); code != 200 {
		t.Fatalf("crash = %d", code)
	}
	if got := <-a.exit; got != 4 {
		t.Fatalf("exit code = %d", got)
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitServing(t *testing.T, addr string) {
	t.Helper()
	for i := 0; i < 200; i++ {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("server did not start")
}

func TestSigtermDrainsInFlight(t *testing.T) {
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out testlog.Buffer
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := serve(ctx, config{listen: addr, crashAfter: -1, drainDelay: 100 * time.Millisecond}, &out)
		done <- result{code, err}
	}()
	waitServing(t, addr)

	slow := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/sleep?d=500ms")
		if err != nil {
			slow <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		slow <- string(b)
	}()
	time.Sleep(100 * time.Millisecond) // let the slow request arrive
	cancel()                           // what SIGTERM does through signal.NotifyContext

	if got := <-slow; got != "slept 500ms\n" {
		t.Fatalf("in-flight request = %q, want it to finish", got)
	}
	r := <-done
	if r.err != nil || r.code != 0 {
		t.Fatalf("serve = %d, %v", r.code, r.err)
	}
	if !strings.Contains(out.String(), "testapp: SIGTERM") {
		t.Fatalf("log = %q", out.String())
	}
}

func TestCrashAfterExitCode(t *testing.T) {
	code, err := serve(context.Background(), config{listen: freeAddr(t), crashAfter: 0, exitCode: 3}, io.Discard)
	if err != nil || code != 3 {
		t.Fatalf("serve = %d, %v", code, err)
	}
}

func TestHelpers(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "log")
	cases := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"exit", "5"}, 5, ""},
		{[]string{"echo", "a", "b"}, 0, "a b\n"},
		{[]string{"append", f, "prestop"}, 0, ""},
		{[]string{"append", f, "again"}, 0, ""},
		{[]string{"cat", f}, 0, "prestop\nagain\n"},
		{[]string{"cat", filepath.Join(dir, "missing")}, 1, ""},
		{[]string{"sleep", "1ms"}, 0, ""},
		{[]string{"sleep", "1ms", "3"}, 3, ""},
		{[]string{"nope"}, 1, ""},
		{[]string{"exit"}, 1, ""},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != c.code || out.String() != c.out {
			t.Errorf("%v = %d %q (stderr %q), want %d %q", c.args, code, out.String(), errb.String(), c.code, c.out)
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			w.WriteHeader(500)
		}
	}))
	defer srv.Close()
	if code := run([]string{"get", srv.URL + "/ok"}, io.Discard, io.Discard); code != 0 {
		t.Errorf("get ok = %d", code)
	}
	if code := run([]string{"get", srv.URL + "/bad"}, io.Discard, io.Discard); code != 1 {
		t.Errorf("get bad = %d", code)
	}
}
