package configcheck

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestCommand(t *testing.T) {
	var got []string
	check := func(file string, out io.Writer) error {
		got = append(got, file)
		if file == "/bad.yaml" {
			return errors.New("bad")
		}
		_, err := io.WriteString(out, file+": ok\n")
		return err
	}
	run := func(args ...string) (string, error) {
		cmd := Command("flotilla-x run", "a long list of what the daemon refuses, long enough to need wrapping across lines", "/etc/x.yaml", check)
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		err := cmd.Execute()
		return out.String(), err
	}
	if out, err := run("check"); err != nil || out != "/etc/x.yaml: ok\n" {
		t.Fatalf("default file: %q %v", out, err)
	}
	if _, err := run("check", "--config", "/bad.yaml"); err == nil {
		t.Fatal("a failed check exited 0")
	}
	if strings.Join(got, " ") != "/etc/x.yaml /bad.yaml" {
		t.Fatalf("checked %v", got)
	}
	help, _ := run("check", "--help")
	if !strings.Contains(help, `as "flotilla-x run" would read it`) || !strings.Contains(help, "as they do for run.") {
		t.Fatalf("help:\n%s", help)
	}
	for _, l := range strings.Split(help, "\n") {
		if len(l) > 100 {
			t.Errorf("help line of %d columns: %q", len(l), l)
		}
	}
}
