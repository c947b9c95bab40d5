package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// packaged is the agent.yaml the flotilla-agent package installs.
const packaged = "../../packaging/agent/agent.yaml"

func TestConfigCheckPackagedFile(t *testing.T) {
	var out bytes.Buffer
	if err := checkConfig(packaged, &out); err != nil {
		t.Fatalf("the packaged agent.yaml fails config check: %v", err)
	}
	if out.String() != packaged+": ok\n" {
		t.Errorf("output %q", out.String())
	}
}

// TestPackagedFileDocumentsEveryKey: every flag of run is a key shown
// (commented out) in the packaged agent.yaml, and every key shown there
// is a flag.
func TestPackagedFileDocumentsEveryKey(t *testing.T) {
	b, err := os.ReadFile(packaged)
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#([a-z][a-z0-9-]*):`).FindAllStringSubmatch(string(b), -1) {
		shown[m[1]] = true
	}
	flags := newRun().Flags()
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Name != "config" && !shown[f.Name] {
			t.Errorf("agent.yaml does not document the key %s", f.Name)
		}
	})
	for k := range shown {
		if flags.Lookup(k) == nil {
			t.Errorf("agent.yaml documents %s, which is not a flag of run", k)
		}
	}
}

func TestConfigCheckRefuses(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		file string
		want []string // each must appear in the error
	}{
		"unknown key": {"node-name: kiosk-1\nnode-nmae: typo\n",
			[]string{`:2: node-nmae: unknown key (did you mean "node-name"?)`, "flotilla-agent run --help"}},
		"wrong types": {"max-pods: many\nlabels: [[a]]\ncni-bin-dir: /a,/b\nserver-listen: {a: b}\n",
			[]string{`:1: max-pods: "many" is not a whole number`, ":2: labels: holds a list", ":3: cni-bin-dir:", "write a list instead", ":4: server-listen: is a map"}},
		"registries field": {"registries:\n  hosts:\n    r.local:5000:\n      plain-http: true\n",
			[]string{`:4: registries: registries.hosts.r.local:5000 has an unknown field "plain-http"`, "plainHTTP"}},
		"trust rule": {"trust:\n  policy:\n    - {image: \"r.local/*\", keys: [a.pub]}\n    - {images: \"r.local/x/*\", unverified: maybe}\n",
			[]string{`:3: trust: trust.policy[] has an unknown field "image"`, `:4: trust: trust.policy[].unverified: "maybe" is not true or false`}},
		"images": {"images:\n  allowTags: {a: b}\n", []string{":2: images: images.allowTags is a map"}},
		"bad values": {"node-name: Kiosk_1\nnode-ip: 1.2.3\ndata-dir: relative\nlog-level: loud\nmax-pods: -1\n",
			[]string{":1: node-name: node name", ":2: node-ip:", "not an IP address", `:3: data-dir: "relative" must be an absolute path`, `:4: log-level: "loud"`, ":5: max-pods:"}},
		"hub without credentials": {"hub: https://hub.example:6443\n", []string{":1: hub: no hub credentials"}},
		"memory limit":            {"memory-limit: 64MB\n", []string{`:1: memory-limit: "64MB": want a size such as 64MiB`}},
		"bad labels":              {"labels: {\"bad key!\": x}\n", []string{":1: labels:"}},
		"not yaml":                {"node-name: [\n", []string{":1:", "not valid YAML"}},
		"not a map":               {"- a\n- b\n", []string{"it must be a mapping"}},
		"duplicate":               {"max-pods: 3\nmax-pods: 4\n", []string{":2: max-pods: given twice (first on line 1)"}},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
			if err := os.WriteFile(file, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			err := checkConfig(file, &bytes.Buffer{})
			if err == nil {
				t.Fatalf("%q passed config check", tc.file)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestConfigCheckCommand runs it as a user does: exit non-zero (an error
// from Execute) for a bad file, and "ok" for a good one.
func TestConfigCheckCommand(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("node-name: kiosk-1\nlabels: {site: berlin}\nmanifests-dir: /srv/manifests\nregistries:\n  hosts:\n    r.local:5000: {plainHTTP: true}\n"), 0o600)
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"config", "check", "--config", good})
	if err := root.Execute(); err != nil || out.String() != good+": ok\n" {
		t.Errorf("good file: %q, %v", out.String(), err)
	}
	root = newRoot()
	root.SetArgs([]string{"config", "check", "--config", filepath.Join(dir, "missing.yaml")})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: %v", err)
	}
}
