package cni

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

func TestDefaultConfList(t *testing.T) {
	b, err := DefaultConfList(Config{PodCIDR: "10.42.3.0/24", IPAMDataDir: "/tmp/ipam"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatalf("libcni refuses the default conflist: %v\n%s", err, b)
	}
	if l.Name != "flotilla" || len(l.Plugins) != 2 || l.Plugins[0].Network.Type != "bridge" || l.Plugins[1].Network.Type != "portmap" {
		t.Fatalf("conflist = %s", b)
	}
	for _, want := range []string{`"bridge": "flotilla0"`, `"subnet": "10.42.3.0/24"`, `"isGateway": true`, `"ipMasq": false`, `"portMappings": true`, `"dataDir": "/tmp/ipam"`, `"type": "host-local"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("conflist lacks %s", want)
		}
	}
	for _, bad := range []Config{{PodCIDR: ""}, {PodCIDR: "10.42.3.0"}, {PodCIDR: "10.42.3.0/24", BridgeName: "a-very-long-bridge-name"}} {
		if _, err := DefaultConfList(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: err = %v, want ErrConfig", bad, err)
		}
	}
}

func TestEnsureDefaultConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{ConfDir: filepath.Join(dir, "net.d"), PodCIDR: "10.42.3.0/24"}
	path, written, err := EnsureDefaultConfig(cfg)
	if err != nil || !written || path != filepath.Join(cfg.ConfDir, DefaultConfFile) {
		t.Fatalf("first = %s %v %v", path, written, err)
	}
	if _, written, _ := EnsureDefaultConfig(cfg); written {
		t.Fatal("unchanged config rewritten")
	}
	cfg.PodCIDR = "10.42.4.0/24"
	if _, written, _ := EnsureDefaultConfig(cfg); !written {
		t.Fatal("pod CIDR change not written")
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), "10.42.4.0/24") {
		t.Fatalf("conflist = %s", b)
	}

	// An administrator's network wins and is never touched.
	mine := filepath.Join(cfg.ConfDir, "05-mine.conflist")
	os.WriteFile(mine, []byte(`{"cniVersion":"1.0.0","name":"mine","plugins":[{"type":"ptp"}]}`), 0o644)
	cfg.PodCIDR = "10.42.5.0/24"
	path, written, err = EnsureDefaultConfig(cfg)
	if err != nil || written || path != mine {
		t.Fatalf("with admin file = %s %v %v", path, written, err)
	}

	// A 10-flotilla.conflist an administrator wrote (no marker) is theirs.
	dir2 := filepath.Join(dir, "net2.d")
	os.MkdirAll(dir2, 0o755)
	custom := []byte(`{"cniVersion":"1.0.0","name":"flotilla","plugins":[{"type":"ptp"}]}`)
	os.WriteFile(filepath.Join(dir2, DefaultConfFile), custom, 0o644)
	if _, written, _ := EnsureDefaultConfig(Config{ConfDir: dir2, PodCIDR: "10.42.3.0/24"}); written {
		t.Fatal("overwrote an administrator's 10-flotilla.conflist")
	}
	if _, _, err := EnsureDefaultConfig(Config{ConfDir: filepath.Join(dir, "empty"), PodCIDR: "bad"}); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad CIDR: %v", err)
	}
}

// TestReadGenerated: the conflist DefaultConfList writes reads back as the
// Config it came from; an administrator's file, or none, reads as nothing.
func TestReadGenerated(t *testing.T) {
	dir := t.TempDir()
	b, err := DefaultConfList(Config{PodCIDR: "10.42.3.0/24", BridgeName: "flt-x0", IPAMDataDir: "/tmp/ipam"})
	if err != nil {
		t.Fatal(err)
	}
	ours := filepath.Join(dir, DefaultConfFile)
	os.WriteFile(ours, b, 0o644)
	gen, err := ReadGenerated(ours)
	if err != nil || gen == nil {
		t.Fatalf("generated: %v %v", gen, err)
	}
	if gen.NetworkName != "flotilla" || gen.BridgeName != "flt-x0" || gen.PodCIDR != "10.42.3.0/24" || gen.IPAMDataDir != "/tmp/ipam" || gen.ConfDir != dir {
		t.Errorf("generated = %+v", *gen)
	}
	admin := filepath.Join(dir, "admin.conflist")
	os.WriteFile(admin, []byte(`{"cniVersion":"1.0.0","name":"flotilla","plugins":[{"type":"bridge","bridge":"br0"}]}`), 0o644)
	for _, p := range []string{admin, filepath.Join(dir, "missing.conflist")} {
		if gen, err := ReadGenerated(p); gen != nil || err != nil {
			t.Errorf("%s: %+v %v, want nothing", p, gen, err)
		}
	}
}
