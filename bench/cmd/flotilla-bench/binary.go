package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"flotilla.dev/flotilla/bench/binsize"
	"flotilla.dev/flotilla/internal/buildtags"
)

const module = "flotilla.dev/flotilla"

// Two programs that differ only in verifying images: what the verifier
// adds to a binary's file.
const (
	pullerOnly = `package main

import (
	"context"

	containerd "github.com/containerd/containerd/v2/client"

	"flotilla.dev/flotilla/registry"
)

func main() {
	c, err := containerd.New("/run/containerd/containerd.sock")
	if err != nil {
		panic(err)
	}
	p, err := registry.NewPuller(c, registry.PullerConfig{Namespace: "size"})
	if err != nil {
		panic(err)
	}
	_, _ = p.Pull(context.Background(), "example.com/app@sha256:0000000000000000000000000000000000000000000000000000000000000000")
}
`
	pullerVerified = `package main

import (
	"context"

	containerd "github.com/containerd/containerd/v2/client"

	"flotilla.dev/flotilla/registry"
	"flotilla.dev/flotilla/registry/trust"
)

func main() {
	c, err := containerd.New("/run/containerd/containerd.sock")
	if err != nil {
		panic(err)
	}
	v, err := trust.New(trust.Config{Dir: "/etc/flotilla/trust"}, trust.NewMemoryCache())
	if err != nil {
		panic(err)
	}
	p, err := registry.NewPuller(c, registry.PullerConfig{Namespace: "size", Verifier: v})
	if err != nil {
		panic(err)
	}
	_, _ = p.Pull(context.Background(), "example.com/app@sha256:0000000000000000000000000000000000000000000000000000000000000000")
}
`
)

// binary measures the agent binary: its size as shipped, where its code
// and read-only data come from, and what image verification adds.
func binary(ctx context.Context) ([]string, error) {
	dir, err := os.MkdirTemp("", "flotilla-binsize-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	kb := func(n int64) string { return fmt.Sprintf("%.0f KB", float64(n)/1024) }
	mb := func(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/(1<<20)) }

	// Stripped as packages ship it; unstripped for the symbol table.
	var shipped int64
	for _, b := range []struct{ out, ldflags string }{{"agent", "-s -w"}, {"agent-syms", ""}} {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", buildtags.Tags, "-ldflags="+b.ldflags, "-o", filepath.Join(dir, b.out), "./cmd/flotilla-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build the agent: %v\n%s", err, out)
		}
	}
	st, err := os.Stat(filepath.Join(dir, "agent"))
	if err != nil {
		return nil, err
	}
	shipped = st.Size()
	sizes, err := binsize.Sizes(ctx, filepath.Join(dir, "agent-syms"))
	if err != nil {
		return nil, err
	}
	var attributed int64
	for _, n := range sizes {
		attributed += n
	}
	var top []string
	for i, p := range binsize.Group(sizes, module) {
		if i == 10 {
			break
		}
		top = append(top, fmt.Sprintf("%s %s", strings.TrimPrefix(p.Path, module+"/"), mb(p.Bytes)))
	}
	var topPkgs []string
	var groups, hub []string
	all := map[string]bool{}
	for p := range sizes {
		all[p] = true
	}
	_, pkgs := binsize.Sum(sizes, all)
	for _, p := range pkgs {
		if len(topPkgs) < 10 {
			topPkgs = append(topPkgs, fmt.Sprintf("%s %s", strings.TrimPrefix(p.Path, module+"/"), kb(p.Bytes)))
		}
		if g, ok := strings.CutPrefix(p.Path, "k8s.io/api/"); ok && !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
		if p.Path == module+"/hub" || strings.HasPrefix(p.Path, module+"/hub/") {
			hub = append(hub, strings.TrimPrefix(p.Path, module+"/"))
		}
	}
	sort.Strings(groups)
	if len(hub) == 0 {
		hub = []string{"none"}
	}
	lines := []string{
		fmt.Sprintf("%-44s %s  (code and read-only data %s; the rest is the runtime's tables)", "agent binary, linux/"+goarch(), mb(shipped), mb(attributed)),
		fmt.Sprintf("%-44s %s", "agent binary, largest by module", strings.Join(top, ", ")),
		fmt.Sprintf("%-44s %s", "agent binary, largest packages", strings.Join(topPkgs, ", ")),
		fmt.Sprintf("%-44s API groups' types: %s; hub packages: %s", "agent binary, what it links", strings.Join(groups, ", "), strings.Join(hub, ", ")),
	}
	// OpenTelemetry comes with the containerd client, which imports it
	// unconditionally. (client-go's scheme, with every API group's types,
	// is gone: cmd/flotilla-agent's deps test keeps it out.)
	for _, via := range []struct{ pkg, name, why string }{
		{"github.com/containerd/containerd/v2/pkg/tracing", "agent binary, OpenTelemetry", "imported by the containerd client whatever the build tags"},
	} {
		only, err := binsize.OnlyThrough(ctx, wd, module+"/cmd/flotilla-agent", via.pkg)
		if err != nil {
			return nil, err
		}
		total, pkgs := binsize.Sum(sizes, only)
		lines = append(lines, fmt.Sprintf("%-44s %s of code in %d packages only it links: %s", via.name, kb(total), len(pkgs), via.why))
	}
	path, err := binsize.ReflectMethodPath(ctx, wd, dir, buildtags.Tags, "./cmd/flotilla-agent")
	if err != nil {
		return nil, err
	}
	dce := "on (no method is called by reflection with a name known only at run time)"
	if path != nil {
		dce = "OFF: every exported method is kept, because of " + strings.Join(callerOf(path), " → ")
	}
	lines = append(lines, fmt.Sprintf("%-44s %s", "agent binary, dead method elimination", dce))

	only, err := binsize.OnlyThrough(ctx, wd, module+"/cmd/flotilla-agent", module+"/registry/trust")
	if err != nil {
		return nil, err
	}
	total, pkgs := binsize.Sum(sizes, only)
	var names []string
	for i, p := range pkgs {
		if i == 4 {
			break
		}
		names = append(names, fmt.Sprintf("%s %s", strings.TrimPrefix(p.Path, module+"/"), kb(p.Bytes)))
	}
	before, after, err := binsize.LinkCost(ctx, wd, dir, pullerOnly, pullerVerified)
	if err != nil {
		return nil, err
	}
	lines = append(lines,
		fmt.Sprintf("%-44s +%s file: a puller alone %s, with the verifier %s; in the agent %s of code in %d packages only registry/trust links (%s)",
			"agent binary, image verification", kb(after-before), mb(before), mb(after), kb(total), len(pkgs), strings.Join(names, ", ")))
	return lines, nil
}

// callerOf shortens a call path to where it leaves code outside the
// standard library: the call that brought the reflection in.
func callerOf(path []string) []string {
	last := len(path) - 1
	for i := len(path) - 1; i >= 0; i-- {
		first, _, _ := strings.Cut(binsize.SymbolPackage(path[i]), "/")
		if strings.Contains(first, ".") {
			last = i
			break
		}
	}
	first := max(0, last-3)
	return path[first:min(len(path), last+2)]
}

func goarch() string {
	out, err := exec.Command("go", "env", "GOARCH").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}
