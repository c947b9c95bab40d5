package packaging

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"flotilla.dev/flotilla/internal/version"
)

func readYAML(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// goreleaserPackage is the nfpms entry of .goreleaser.yaml with this id.
func goreleaserPackage(t *testing.T, gr map[string]any, id string) map[string]any {
	t.Helper()
	for _, e := range gr["nfpms"].([]any) {
		if m := e.(map[string]any); m["id"] == id {
			return m
		}
	}
	t.Fatalf(".goreleaser.yaml has no nfpms entry %q", id)
	return nil
}

// TestNFPMAgreesWithGoreleaser: `make packages` (packaging/nfpm) and a
// release (.goreleaser.yaml) describe the same two packages.
func TestNFPMAgreesWithGoreleaser(t *testing.T) {
	gr := readYAML(t, ".goreleaser.yaml")
	binaries := map[string]string{} // build id -> binary
	for _, b := range gr["builds"].([]any) {
		m := b.(map[string]any)
		binaries[m["id"].(string)] = m["binary"].(string)
	}
	for _, name := range []string{"flotilla-agent", "flotilla-hub"} {
		t.Run(name, func(t *testing.T) {
			nf := readYAML(t, "packaging/nfpm/"+name+".yaml")
			g := goreleaserPackage(t, gr, name)
			if nf["name"] != g["package_name"] {
				t.Errorf("name %v, goreleaser package_name %v", nf["name"], g["package_name"])
			}
			if !reflect.DeepEqual(nf["depends"], g["dependencies"]) {
				t.Errorf("depends %v, goreleaser dependencies %v", nf["depends"], g["dependencies"])
			}
			for _, key := range []string{"description", "maintainer", "vendor", "section", "priority", "release", "changelog", "scripts", "overrides", "deb", "rpm"} {
				if !reflect.DeepEqual(nf[key], g[key]) {
					t.Errorf("%s differs:\n nfpm:       %v\n goreleaser: %v", key, nf[key], g[key])
				}
			}
			// The binaries: ${BIN}/X in nfpm, builds by id in goreleaser.
			var nfBins, grBins []string
			var nfFiles []any
			for _, c := range nf["contents"].([]any) {
				m := c.(map[string]any)
				if src, _ := m["src"].(string); strings.HasPrefix(src, "${BIN}/") {
					nfBins = append(nfBins, m["dst"].(string))
					if filepath.Base(src) != filepath.Base(m["dst"].(string)) {
						t.Errorf("%s is installed as %s", src, m["dst"])
					}
					continue
				}
				nfFiles = append(nfFiles, c)
			}
			for _, id := range g["ids"].([]any) {
				grBins = append(grBins, g["bindir"].(string)+"/"+binaries[id.(string)])
			}
			sort.Strings(nfBins)
			sort.Strings(grBins)
			if !slices.Equal(nfBins, grBins) {
				t.Errorf("binaries: nfpm %v, goreleaser %v", nfBins, grBins)
			}
			if !reflect.DeepEqual(nfFiles, g["contents"]) {
				t.Errorf("contents differ:\n nfpm:       %v\n goreleaser: %v", nfFiles, g["contents"])
			}
			// Every file they name is in the repository.
			for _, c := range nfFiles {
				if src, ok := c.(map[string]any)["src"].(string); ok {
					if _, err := os.Stat(filepath.Join(root, src)); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
}

// TestBuildsAgree: the Makefile, build.sh and .goreleaser.yaml build every
// command the same way, with the version linked where `version` reads it.
func TestBuildsAgree(t *testing.T) {
	_ = version.Version + version.Commit // the variables the -X flags set
	const xVersion = "-X flotilla.dev/flotilla/internal/version.Version="
	const xCommit = "-X flotilla.dev/flotilla/internal/version.Commit="
	for _, file := range []string{"Makefile", "packaging/build.sh"} {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		re := regexp.MustCompile(`(?m)^LDFLAGS *:?= *"?-s -w ` + regexp.QuoteMeta(xVersion) + `\S+ ` + regexp.QuoteMeta(xCommit) + `\S+"?$`)
		if !re.Match(b) {
			t.Errorf("%s: no LDFLAGS line with -s -w and both -X flags", file)
		}
	}
	gr := readYAML(t, ".goreleaser.yaml")
	mains := map[string]bool{}
	for _, b := range gr["builds"].([]any) {
		m := b.(map[string]any)
		id := m["id"]
		mains[m["main"].(string)] = true
		if !reflect.DeepEqual(m["env"], []any{"CGO_ENABLED=0"}) || !reflect.DeepEqual(m["flags"], []any{"-trimpath"}) {
			t.Errorf("build %s: env %v flags %v, want CGO_ENABLED=0 and -trimpath", id, m["env"], m["flags"])
		}
		if !reflect.DeepEqual(m["goos"], []any{"linux"}) || !reflect.DeepEqual(m["goarch"], []any{"amd64", "arm64", "arm"}) || !reflect.DeepEqual(m["goarm"], []any{"7"}) {
			t.Errorf("build %s: goos %v goarch %v goarm %v, want linux amd64, arm64 and armv7", id, m["goos"], m["goarch"], m["goarm"])
		}
		ld := strings.Join(toStrings(m["ldflags"]), " ")
		if !strings.HasPrefix(ld, "-s -w ") || !strings.Contains(ld, xVersion+"v{{ .Version }}") || !strings.Contains(ld, xCommit+"{{ .ShortCommit }}") {
			t.Errorf("build %s: ldflags %q", id, ld)
		}
	}
	cmds, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		if c.IsDir() && !mains["./cmd/"+c.Name()] {
			t.Errorf(".goreleaser.yaml does not build ./cmd/%s", c.Name())
		}
	}
}

func toStrings(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}

// unit reads a systemd unit: "Section.Key" -> values, in order.
func unit(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := map[string][]string{}
	section := ""
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, _ := strings.Cut(line, "=")
			u[section+"."+k] = append(u[section+"."+k], v)
		}
	}
	return u
}

// TestUnits checks what the units promise: the agent's containers outlive
// it (KillMode=process), it starts after containerd, both restart always,
// and ExecStart runs the packaged binary with the packaged config.
func TestUnits(t *testing.T) {
	agent := unit(t, "packaging/agent/flotilla-agent.service")
	for key, want := range map[string]string{
		"Service.KillMode":  "process",
		"Service.Delegate":  "yes",
		"Service.Restart":   "always",
		"Service.ExecStart": "/usr/bin/flotilla-agent run --config /etc/flotilla/agent.yaml",
		"Install.WantedBy":  "multi-user.target",
	} {
		if got := agent[key]; !slices.Equal(got, []string{want}) {
			t.Errorf("flotilla-agent.service %s = %v, want %s", key, got, want)
		}
	}
	for _, key := range []string{"Unit.After", "Unit.Wants"} {
		if !slices.Contains(strings.Fields(strings.Join(agent[key], " ")), "containerd.service") {
			t.Errorf("flotilla-agent.service %s = %v, want containerd.service in it", key, agent[key])
		}
	}
	hub := unit(t, "packaging/hub/flotilla-hub.service")
	for key, want := range map[string]string{
		"Service.Restart":   "always",
		"Service.ExecStart": "/usr/bin/flotilla-hub serve --config /etc/flotilla/hub.yaml",
		"Install.WantedBy":  "multi-user.target",
	} {
		if got := hub[key]; !slices.Equal(got, []string{want}) {
			t.Errorf("flotilla-hub.service %s = %v, want %s", key, got, want)
		}
	}
}

// TestScriptsParse: every maintainer script is valid POSIX sh, as dash
// (Debian's /bin/sh) reads it.
func TestScriptsParse(t *testing.T) {
	scripts, _ := filepath.Glob(filepath.Join(root, "packaging/*/[dr][ep][bm]/*"))
	if len(scripts) != 12 {
		t.Fatalf("found %d maintainer scripts, want 12 (3 deb and 3 rpm for each package): %v", len(scripts), scripts)
	}
	shells := []string{"sh"}
	if _, err := exec.LookPath("dash"); err == nil {
		shells = append(shells, "dash")
	}
	for _, s := range scripts {
		st, err := os.Stat(s)
		if err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("%s is not executable: %v", s, err)
		}
		for _, sh := range shells {
			if out, err := exec.Command(sh, "-n", s).CombinedOutput(); err != nil {
				t.Errorf("%s -n %s: %v\n%s", sh, s, err, out)
			}
		}
	}
}
