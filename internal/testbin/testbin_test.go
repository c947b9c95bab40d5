package testbin

import (
	"strings"
	"testing"
)

func TestKubectlLDFlags(t *testing.T) {
	got, err := kubectlLDFlags("v0.37.2")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"version.gitVersion=v1.37.2 ", "version.gitMajor=1 ", "version.gitMinor=37"} {
		if !strings.Contains(got+" ", w) {
			t.Errorf("ldflags %q lack %q", got, w)
		}
	}
	for _, bad := range []string{"v1.37.2", "v0.37", "v0.", "devel"} {
		if _, err := kubectlLDFlags(bad); err == nil {
			t.Errorf("kubectlLDFlags(%q) accepted", bad)
		}
	}
}
