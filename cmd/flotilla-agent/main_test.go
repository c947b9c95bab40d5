package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"flotilla.dev/flotilla/agent/agent"
	"flotilla.dev/flotilla/internal/config"
)

// load parses args for the run command and reads the config file.
func load(t *testing.T, file string, args ...string) (map[string]string, error) {
	t.Helper()
	cmd := newRun()
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	v, err := config.Load(cmd, file, file != "")
	if err != nil {
		return nil, err
	}
	cfg, err := agentConfig(v)
	if err != nil {
		return nil, err
	}
	out := map[string]string{
		"node": cfg.NodeName, "data": cfg.DataDir, "ns": cfg.ContainerdNamespace, "ip": cfg.NodeIP,
		"listen": cfg.ServerListen, "bins": strings.Join(cfg.CNIBinDirs, ":"), "logs": cfg.LogDir,
		"manifests": cfg.ManifestsDir, "standalone": fmt.Sprint(cfg.Credentials == nil),
		"trustdir": cfg.TrustDir, "allowTags": strings.Join(cfg.Images.AllowTags, ","),
	}
	for i, r := range cfg.TrustPolicy {
		out[fmt.Sprintf("trust:%d", i)] = fmt.Sprintf("%s %v %v", r.Images, r.Keys, r.Unverified)
	}
	for k, v := range cfg.Labels {
		out["label:"+k] = v
	}
	for h, hc := range cfg.Registries.Hosts {
		if hc.PlainHTTP {
			out["plain:"+h] = "true"
		}
	}
	return out, nil
}

func TestConfigSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.yaml")
	os.WriteFile(file, []byte(`node-name: dev-7
kubeconfig: /etc/flotilla/agent.kubeconfig
labels: {site: berlin, line: 3}
data-dir: /srv/agent
cni-bin-dir: [/opt/cni/bin]
registries:
  hosts:
    registry.local:5000: {plainHTTP: true}
    10.99.0.1:5055: {plainHTTP: true}
`), 0o644)
	got, err := load(t, file)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"node": "dev-7", "data": "/srv/agent", "ns": "flotilla", "label:site": "berlin", "label:line": "3",
		"listen": ":10250", "bins": "/opt/cni/bin", "logs": "/var/log/flotilla/pods", "plain:registry.local:5000": "true",
		"plain:10.99.0.1:5055": "true", "standalone": "false", "manifests": "/etc/flotilla/manifests",
	} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q (all: %v)", k, got[k], want, got)
		}
	}
	// Environment over file, flags over environment.
	t.Setenv("FLOTILLA_NODE_NAME", "from-env")
	t.Setenv("FLOTILLA_LABELS", "tier=edge")
	got, err = load(t, file, "--node-ip", "10.1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	if got["node"] != "from-env" || got["label:tier"] != "edge" || got["label:site"] != "" || got["ip"] != "10.1.2.3" {
		t.Errorf("env/flags: %v", got)
	}
	got, err = load(t, file, "--node-name", "from-flag", "--labels", "a=b,c=d")
	if err != nil || got["node"] != "from-flag" || got["label:a"] != "b" || got["label:c"] != "d" {
		t.Errorf("flags: %v %v", got, err)
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("kubeconfig: /x\nnode-nmae: typo\n"), 0o644)
	for name, tc := range map[string]struct {
		file string
		args []string
		want string
	}{
		"unknown key":             {bad, nil, `unknown key "node-nmae"`},
		"missing file":            {filepath.Join(dir, "nope.yaml"), nil, "nope.yaml"},
		"hub without credentials": {"", []string{"--hub", "https://hub:6443"}, "give --kubeconfig"},
		"bad labels":              {"", []string{"--kubeconfig", "/x", "--labels", "novalue"}, "not key=value"},
	} {
		_, err := load(t, tc.file, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
}

func TestNoHubIsStandalone(t *testing.T) {
	cfg, err := load(t, "", "--manifests-dir", "/srv/manifests")
	if err != nil {
		t.Fatalf("no hub, no credentials: %v, want a standalone configuration", err)
	}
	if cfg["standalone"] != "true" || cfg["manifests"] != "/srv/manifests" {
		t.Errorf("standalone %s, manifests dir %q; want true and /srv/manifests", cfg["standalone"], cfg["manifests"])
	}
}

func TestVersionAndHelp(t *testing.T) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"version"})
	if err := root.Execute(); err != nil || !strings.HasPrefix(out.String(), "flotilla-agent ") {
		t.Errorf("version: %q %v", out.String(), err)
	}
	root = newRoot()
	out.Reset()
	root.SetOut(&out)
	root.SetArgs([]string{"run", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"--hub", "--token", "--ca-hash", "--node-name", "--data-dir", "--containerd-namespace", "--containerd-address",
		"--labels", "--kubeconfig", "--node-ip", "--server-listen", "--cni-conf-dir", "--cni-bin-dir", "--log-dir", "--manifests-dir"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("run --help lacks %s", f)
		}
	}
	// Bare flags run the agent too: a bad one is refused as by run.
	root = newRoot()
	tmp := t.TempDir()
	root.SetArgs([]string{"--config", "", "--data-dir", filepath.Join(tmp, "data"), "--log-dir", filepath.Join(tmp, "logs"), "--kubeconfig", filepath.Join(tmp, "missing")})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("bare flags: %v", err)
	}
}

func TestTrustConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agent.yaml")
	os.WriteFile(file, []byte(`kubeconfig: /etc/flotilla/agent.kubeconfig
trust-dir: /srv/trust
trust:
  policy:
  - {images: "registry.local:5000/team-a/*", keys: [team-a.pub]}
  - {images: "registry.local:5000/tools/*", unverified: true}
images:
  allowTags: ["registry.local:5000/dev/*"]
`), 0o644)
	got, err := load(t, file)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"trustdir": "/srv/trust", "allowTags": "registry.local:5000/dev/*",
		"trust:0": "registry.local:5000/team-a/* [team-a.pub] false", "trust:1": "registry.local:5000/tools/* [] true",
	} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("kubeconfig: /x\ntrust:\n  policy:\n  - {images: \"[\", keys: [a.pub]}\n"), 0o644)
	cmd := newRun()
	v, err := config.Load(cmd, bad, true)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := agentConfig(v)
	if err == nil {
		_, err = agent.New(cfg)
	}
	if err == nil || !strings.Contains(err.Error(), "trust") {
		t.Errorf("a bad image glob in the trust policy: %v, want an error naming the trust policy", err)
	}
}

// TestRestartPacer: restarts after short runs wait longer each time, up
// to 30 s; a run of a minute or more starts the count again.
func TestRestartPacer(t *testing.T) {
	var p restartPacer
	s := time.Second
	for i, c := range []struct{ ran, want time.Duration }{
		{2 * time.Minute, 0},
		{5 * s, s}, {s, 2 * s}, {s, 4 * s}, {s, 8 * s}, {s, 16 * s}, {s, 30 * s}, {s, 30 * s},
		{time.Minute, 0},
		{s, s},
	} {
		if got := p.next(c.ran); got != c.want {
			t.Errorf("restart %d after a run of %v: wait %v, want %v", i, c.ran, got, c.want)
		}
	}
}
