package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"flotilla.dev/flotilla/bench/binsize"
	"flotilla.dev/flotilla/internal/buildtags"
	"flotilla.dev/flotilla/internal/testenv"
)

// TestLinksOnlyWhatADeviceNeeds keeps out of the agent binary what made
// it large for nothing (issue 19): anything of the hub, client-go's
// Clientset, informers, typed clients and their scheme (each links or
// registers every API group; agent/hubclient has the agent's own over a
// scheme of its groups), and gRPC's x/net/trace (whose html/template
// turns off the linker's dead method elimination).
func TestLinksOnlyWhatADeviceNeeds(t *testing.T) {
	goTool := testenv.RequireTool(t, "go", "the go command lists the agent's dependencies")
	out, err := exec.Command(goTool, "list", "-deps", "-tags", buildtags.Tags, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		var why string
		switch {
		case pkg == "flotilla.dev/flotilla/hub" || strings.HasPrefix(pkg, "flotilla.dev/flotilla/hub/"):
			why = "the hub"
		case pkg == "k8s.io/client-go/kubernetes":
			why = "client-go's Clientset (agent/hubclient has the groups the agent uses)"
		case pkg == "k8s.io/client-go/kubernetes/scheme":
			why = "client-go's scheme, which registers every API group's types (agent/hubclient.Scheme has the agent's groups)"
		case strings.HasPrefix(pkg, "k8s.io/client-go/kubernetes/typed/"):
			why = "client-go's typed clients, which register their types in client-go's scheme (agent/hubclient has the agent's own)"
		case strings.HasPrefix(pkg, "k8s.io/client-go/applyconfigurations/"):
			why = "client-go's apply configurations (the typed clients' Apply, which the agent does not use)"
		case pkg == "flotilla.dev/flotilla/agent/hubclient/fromclientset":
			why = "the adapter from a client-go Clientset, for tests only"
		case pkg == "k8s.io/client-go/informers" || strings.HasPrefix(pkg, "k8s.io/client-go/informers/"):
			why = "client-go's informers (agent/hubclient.Informers)"
		case pkg == "golang.org/x/net/trace":
			why = "gRPC's tracing (build with -tags " + buildtags.Tags + ")"
		}
		if why != "" {
			t.Errorf("the agent links %s: %s", pkg, why)
		}
	}
}

// TestDeadMethodElimination: nothing in the agent calls methods by
// reflection with a name known only at run time (text/template's
// execution is the usual one), which would make the linker keep every
// exported method of every type: 12 MB of the agent binary when
// containerd's image-config user lookup and gRPC's tracing did.
func TestDeadMethodElimination(t *testing.T) {
	testenv.Integration(t, "builds the agent")
	testenv.RequireTool(t, "go", "the go command builds the agent")
	path, err := binsize.ReflectMethodPath(context.Background(), "../..", t.TempDir(), buildtags.Tags, "./cmd/flotilla-agent")
	if err != nil {
		t.Fatal(err)
	}
	if path != nil {
		t.Errorf("the linker keeps every exported method: a method is called by reflection through\n  %s", strings.Join(path, "\n  "))
	}
}
