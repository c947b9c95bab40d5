package main

import (
	"strings"
	"testing"
)

func TestCallerOf(t *testing.T) {
	path := []string{"go:main.inittasks", "golang.org/x/net/trace..inittask", "golang.org/x/net/trace.init.0",
		"golang.org/x/net/trace.Events", "golang.org/x/net/trace.RenderEvents", "html/template.(*Template).Execute",
		"text/template.(*Template).execute", "text/template.(*state).walk", "text/template.(*state).evalField"}
	want := "golang.org/x/net/trace..inittask → golang.org/x/net/trace.init.0 → golang.org/x/net/trace.Events → golang.org/x/net/trace.RenderEvents → html/template.(*Template).Execute"
	if got := strings.Join(callerOf(path), " → "); got != want {
		t.Errorf("callerOf = %s\nwant       %s", got, want)
	}
	std := []string{"runtime.main", "main.main", "text/template.(*state).evalField"}
	if got := strings.Join(callerOf(std), " "); got != "runtime.main main.main text/template.(*state).evalField" {
		t.Errorf("callerOf(only std and main) = %s", got)
	}
}
