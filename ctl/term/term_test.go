package term

import (
	"bytes"
	"os"
	"testing"
)

func TestNoColourOffTerminalOrWithNoColor(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "NO_COLOR" {
				return v
			}
			return ""
		}
	}
	if For(&bytes.Buffer{}, env("")).Color {
		t.Error("colour on a buffer")
	}
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if For(f, env("")).Color {
		t.Error("colour on a regular file")
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		if !For(tty, env("")).Color {
			t.Error("no colour on a terminal")
		}
		if For(tty, env("1")).Color {
			t.Error("colour on a terminal with NO_COLOR=1")
		}
	}
	if got := (Style{}).Red("x"); got != "x" {
		t.Errorf("plain style decorated: %q", got)
	}
	if got := (Style{Color: true}).Red("x"); got != "\x1b[31mx\x1b[0m" {
		t.Errorf("red = %q", got)
	}
}
