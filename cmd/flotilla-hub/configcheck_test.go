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

// packaged is the hub.yaml the flotilla-hub package installs.
const packaged = "../../packaging/hub/hub.yaml"

func TestConfigCheckPackagedFile(t *testing.T) {
	var out bytes.Buffer
	if err := checkConfig(packaged, &out); err != nil {
		t.Fatalf("the packaged hub.yaml fails config check: %v", err)
	}
	if out.String() != packaged+": ok\n" {
		t.Errorf("output %q", out.String())
	}
}

// TestPackagedFileDocumentsEveryKey: every flag of serve is a key shown
// (commented out) in the packaged hub.yaml, and every key shown is a flag.
func TestPackagedFileDocumentsEveryKey(t *testing.T) {
	b, err := os.ReadFile(packaged)
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#([a-z][a-z0-9-]*):`).FindAllStringSubmatch(string(b), -1) {
		shown[m[1]] = true
	}
	flags := newServe().Flags()
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Name != "config" && !shown[f.Name] {
			t.Errorf("hub.yaml does not document the key %s", f.Name)
		}
	})
	for k := range shown {
		if flags.Lookup(k) == nil {
			t.Errorf("hub.yaml documents %s, which is not a flag of serve", k)
		}
	}
}

func TestConfigCheckRefuses(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		file string
		want []string
	}{
		"unknown key": {"listen: :6443\nsource-uri: https://git.example/x.git\n",
			[]string{`:2: source-uri: unknown key (did you mean "source-url"?)`, "flotilla-hub serve --help"}},
		"wrong types": {"allow-tag-images: yes\nsource-interval: 30\ntls-san: {a: b}\n",
			[]string{`:1: allow-tag-images: "yes" is not true or false`, `:2: source-interval: "30" is not a duration`, ":3: tls-san: is a map"}},
		"bad values": {"listen: 6443\ntls-san: [hub.example, bad_name]\ndata-dir: relative\nadvertise-url: hub:6443\nlog-level: loud\n",
			[]string{`:1: listen: "6443"`, `:2: tls-san: pki: SAN "bad_name"`, `:3: data-dir: "relative" must be an absolute path`,
				`:4: advertise-url: "hub:6443": want https://HOST:PORT`, `:5: log-level: "loud"`}},
		"bad tag pattern": {"allow-tags: [\"\"]\n", []string{":1: allow-tags:"}},
		"bad source": {"source-url: https://git.example/fleet.git\nsource-name: nonamespace\nsource-interval: 100ms\n",
			[]string{`:2: source-name: "nonamespace": want namespace/name`}},
		"bad store":        {"store: sqlite\n", []string{`:1: store: "sqlite": want bbolt or etcd`}},
		"bad pod security": {"pod-security-default: strict\n", []string{`:1: pod-security-default: pod security: default level "strict"`}},
		"etcd without endpoints": {"store: etcd\netcd-certfile: /nonexistent/hub.pem\n",
			[]string{"store: etcd needs --etcd-endpoints", "etcd-certfile: stat /nonexistent/hub.pem", "go together"}},
		"etcd bad endpoint": {"store: etcd\netcd-endpoints: [10.0.0.1:2379]\netcd-prefix: flotilla/\n",
			[]string{`"10.0.0.1:2379" is not http(s)://HOST:PORT`, `etcd-prefix: "flotilla/" must start with /`}},
		"endpoints without etcd": {"etcd-endpoints: [http://10.0.0.1:2379]\n", []string{`--store is "bbolt": set --store etcd`}},
		"short interval": {"source-url: https://git.example/fleet.git\nsource-interval: 100ms\n",
			[]string{"the source given with --source-*: spec.interval", "must be at least 1s"}},
		"bad memory limit":  {"listen: :6443\nmemory-limit: 1GB\n", []string{`:2: memory-limit: "1GB": want a quantity such as 1Gi`}},
		"tiny memory limit": {"memory-limit: 1\n", []string{`:1: memory-limit: "1" is 1 bytes, below the 64Mi`}},
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

// TestConfigCheckCommand: exit non-zero for a bad file, "ok" for a good
// one, and nothing written anywhere (the data dir is not created).
func TestConfigCheckCommand(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	data := filepath.Join(dir, "hub-data")
	os.WriteFile(good, []byte("data-dir: "+data+"\nlisten: 127.0.0.1:6443\ntls-san: [hub.example, 10.0.0.1]\nsource-url: https://git.example/fleet.git\nsource-path: [clusters/shops]\n"), 0o600)
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"config", "check", "--config", good})
	if err := root.Execute(); err != nil || out.String() != good+": ok\n" {
		t.Errorf("good file: %q, %v", out.String(), err)
	}
	if _, err := os.Stat(data); err == nil {
		t.Errorf("config check created the data dir %s", data)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("listen: nope\n"), 0o600)
	root = newRoot()
	root.SetArgs([]string{"config", "check", "--config", bad})
	if err := root.Execute(); err == nil {
		t.Error("a bad file passed")
	}
}
