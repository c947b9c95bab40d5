package runtime

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"flotilla.dev/flotilla/internal/testlog"
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// session is an Attach running in the background with a stdin the test
// writes to.
type session struct {
	in   *io.PipeWriter
	out  *testlog.Buffer
	done chan error
}

func attach(ctx context.Context, rt *Runtime, id string, tty bool) *session {
	pr, pw := io.Pipe()
	s := &session{in: pw, out: &testlog.Buffer{}, done: make(chan error, 1)}
	go func() { s.done <- rt.Attach(ctx, id, ExecIO{Stdin: pr, Stdout: s.out, Stderr: s.out, TTY: tty}) }()
	return s
}

func (s *session) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("the attach session did not end")
		return nil
	}
}

// TestAttach writes to the stdin of a real container's main process
// through Attach and reads its output back: across sessions and an agent
// restart (stdin stays open), with stdinOnce (the first session's end is
// the process's EOF) and with a terminal.
func TestAttach(t *testing.T) {
	e := newEnv(t)
	sb := e.sandbox(t, "attach")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	relay := func(name string, mod func(*ContainerConfig)) *Container {
		return e.run(t, sb, name, func(c *ContainerConfig) {
			c.Args = []string{"/testapp", "relay"}
			mod(c)
		})
	}

	c := relay("keep", func(c *ContainerConfig) { c.Stdin = true })
	s := attach(ctx, e.rt, c.ID, false)
	io.WriteString(s.in, "one\n")
	waitFor(t, "the first line back", func() bool { return strings.Contains(s.out.String(), "got one\n") })
	s.in.Close() // ends this session, not the process's stdin
	if err := s.wait(t); err != nil {
		t.Fatalf("first session: %v", err)
	}
	if st, err := e.rt.ContainerStatus(ctx, c.ID); err != nil || st.Status.State != StateRunning || !st.Stdin || st.StdinOnce || st.TTY {
		t.Fatalf("after the first session: %+v, %v", st, err)
	}

	// An agent restart: the FIFOs are dropped, a new runtime takes them
	// over, and the process's stdin is still open.
	e.rt.abandonIO()
	rt2, err := New(e.rt.cfg)
	if err != nil {
		t.Fatal(err)
	}
	s = attach(ctx, rt2, c.ID, false)
	io.WriteString(s.in, "two\n")
	waitFor(t, "a line after the restart", func() bool { return strings.Contains(s.out.String(), "got two\n") })
	s.in.Close()
	if err := s.wait(t); err != nil {
		t.Fatalf("session after the restart: %v", err)
	}
	log, _ := os.ReadFile(c.LogPath)
	for _, want := range []string{" stdout F got one\n", " stdout F got two\n"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("log %s lacks %q:\n%s", c.LogPath, want, log)
		}
	}

	once := relay("once", func(c *ContainerConfig) { c.Stdin, c.StdinOnce = true, true })
	out := &testlog.Buffer{}
	if err := e.rt.Attach(ctx, once.ID, ExecIO{Stdin: strings.NewReader("a\nb\n"), Stdout: out, Stderr: out}); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "got a\ngot b\nstdin closed\n" {
		t.Errorf("stdinOnce: output %q", got)
	}
	waitFor(t, "the stdinOnce container to exit", func() bool {
		st, err := e.rt.ContainerStatus(ctx, once.ID)
		return err == nil && st.Status.State == StateExited && st.Status.ExitCode == 0
	})

	term := relay("tty", func(c *ContainerConfig) { c.Stdin, c.TTY = true, true })
	s = attach(ctx, e.rt, term.ID, true)
	io.WriteString(s.in, "x\n")
	// The terminal echoes the input and turns "\n" into "\r\n".
	waitFor(t, "output through the terminal", func() bool { return strings.Contains(s.out.String(), "got x\r\n") })
	s.in.Close()
	if err := s.wait(t); err != nil {
		t.Fatalf("tty session: %v", err)
	}

	plain := e.run(t, sb, "plain", func(c *ContainerConfig) { c.Args = []string{"/testapp", "sleep", "1h"} })
	if err := e.rt.Attach(ctx, plain.ID, ExecIO{Stdout: io.Discard}); !errors.Is(err, ErrInvalid) {
		t.Errorf("attach to a container without stdin or tty: %v", err)
	}
	noStdin := relay("nostdin", func(c *ContainerConfig) { c.TTY = true })
	if err := e.rt.Attach(ctx, noStdin.ID, ExecIO{Stdin: strings.NewReader("x"), Stdout: io.Discard}); !errors.Is(err, ErrNoStdin) {
		t.Errorf("stdin to a container without stdin: %v", err)
	}
}
