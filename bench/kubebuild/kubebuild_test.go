package kubebuild

import (
	"errors"
	"strings"
	"testing"
)

// A go.mod as `go mod edit -json` prints k8s.io/kubernetes's: staging
// modules replaced with directories, one module replaced with a version
// (kept out: only staging directories are replaced), go and godebug lines.
const kubernetesMod = `{
	"Module": {"Path": "k8s.io/kubernetes"},
	"Go": "1.26.0",
	"GoDebug": [{"Key": "default", "Value": "go1.26"}],
	"Require": [{"Path": "k8s.io/api", "Version": "v0.0.0"}],
	"Replace": [
		{"Old": {"Path": "k8s.io/api"}, "New": {"Path": "./staging/src/k8s.io/api"}},
		{"Old": {"Path": "k8s.io/client-go"}, "New": {"Path": "./staging/src/k8s.io/client-go"}},
		{"Old": {"Path": "github.com/example/fork"}, "New": {"Path": "github.com/example/fork", "Version": "v1.2.3"}}
	]
}`

func TestModuleReplacesStagingWithReleases(t *testing.T) {
	got, err := Module([]byte(kubernetesMod), "v1.37.2")
	if err != nil {
		t.Fatal(err)
	}
	want := `module kubelet-build

go 1.26.0

godebug default=go1.26

require k8s.io/kubernetes v1.37.2

replace k8s.io/api => k8s.io/api v0.37.2
replace k8s.io/client-go => k8s.io/client-go v0.37.2
`
	if string(got) != want {
		t.Errorf("Module =\n%s\nwant\n%s", got, want)
	}
}

func TestModuleRejectsWhatIsNotARelease(t *testing.T) {
	for _, v := range []string{"", "1.37.2", "v0.37.2", "v1.37", "v1.37.2-rc.0", "v1..2", "v1.37.2.1"} {
		if _, err := Module([]byte(kubernetesMod), v); !errors.Is(err, ErrVersion) {
			t.Errorf("Module(%q) error = %v, want ErrVersion", v, err)
		}
	}
	if _, err := Module([]byte(`{"Go": "1.26.0"}`), "v1.37.2"); err == nil || !strings.Contains(err.Error(), "staging") {
		t.Errorf("a go.mod without staging replaces: error = %v, want one that says so", err)
	}
}

func TestLdflagsStampTheRelease(t *testing.T) {
	f := ldflags("v1.37.2")
	for _, want := range []string{"-s", "-w", "-X=k8s.io/component-base/version.gitVersion=v1.37.2",
		"-X=k8s.io/component-base/version.gitMajor=1", "-X=k8s.io/component-base/version.gitMinor=37"} {
		if !strings.Contains(" "+f+" ", " "+want+" ") {
			t.Errorf("ldflags = %q, missing %q", f, want)
		}
	}
}
