package cni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"

	"github.com/containernetworking/cni/libcni"

	"flotilla.dev/flotilla/internal/atomicfile"
)

// Defaults from Flotilla's contracts.
const (
	DefaultConfDir     = "/etc/cni/net.d"
	DefaultCacheDir    = "/var/lib/cni"
	DefaultIPAMDataDir = "/var/lib/cni/networks"
	DefaultNetworkName = "flotilla"
	DefaultBridge      = "flotilla0"
	DefaultConfFile    = "10-flotilla.conflist"
	// CNIVersion is the newest version Debian's plugins (1.1) speak.
	CNIVersion = "1.0.0"
	// generatedKey marks a conflist Flotilla wrote, which it may rewrite.
	generatedKey = "flotilla.dev/generated"
)

// DefaultBinDirs are searched in order for plugins.
var DefaultBinDirs = []string{"/opt/cni/bin", "/usr/lib/cni"}

// ErrConfig is returned for a configuration that cannot work.
var ErrConfig = errors.New("invalid CNI configuration")

// Config says where CNI lives and, for the default network, what it is.
type Config struct {
	ConfDir  string
	BinDirs  []string
	CacheDir string
	// PodCIDR is the node's pod range (Node.spec.podCIDR); required to
	// write the default network.
	PodCIDR string
	// NetworkName, BridgeName and IPAMDataDir shape the default network.
	NetworkName string
	BridgeName  string
	IPAMDataDir string
	// IfName is the pod's interface; "eth0" when empty.
	IfName string
}

func (c Config) withDefaults() Config {
	if c.ConfDir == "" {
		c.ConfDir = DefaultConfDir
	}
	if len(c.BinDirs) == 0 {
		c.BinDirs = DefaultBinDirs
	}
	if c.CacheDir == "" {
		c.CacheDir = DefaultCacheDir
	}
	if c.NetworkName == "" {
		c.NetworkName = DefaultNetworkName
	}
	if c.BridgeName == "" {
		c.BridgeName = DefaultBridge
	}
	if c.IPAMDataDir == "" {
		c.IPAMDataDir = DefaultIPAMDataDir
	}
	if c.IfName == "" {
		c.IfName = "eth0"
	}
	return c
}

// DefaultConfList renders the default network for c.
func DefaultConfList(c Config) ([]byte, error) {
	c = c.withDefaults()
	_, cidr, err := net.ParseCIDR(c.PodCIDR)
	if err != nil {
		return nil, fmt.Errorf("%w: pod CIDR %q: %v (set the node's spec.podCIDR, e.g. 10.42.3.0/24)", ErrConfig, c.PodCIDR, err)
	}
	if len(c.BridgeName) > 15 {
		return nil, fmt.Errorf("%w: bridge name %q is longer than 15 characters", ErrConfig, c.BridgeName)
	}
	defaultRoute := "0.0.0.0/0"
	if cidr.IP.To4() == nil {
		defaultRoute = "::/0"
	}
	conf := map[string]any{
		"cniVersion": CNIVersion,
		"name":       c.NetworkName,
		generatedKey: true,
		"plugins": []any{
			map[string]any{
				"type":      "bridge",
				"bridge":    c.BridgeName,
				"isGateway": true,
				// No masquerade here: traffic between devices keeps the
				// pod's address (host-gateway routes carry it), and
				// agent/routes masquerades only what leaves the pod network.
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": cidr.String()}}},
					"routes":  []map[string]string{{"dst": defaultRoute}},
					"dataDir": c.IPAMDataDir,
				},
			},
			map[string]any{
				"type":         "portmap",
				"capabilities": map[string]bool{"portMappings": true},
			},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// confFiles lists the conf dir's network files in the order CNI runtimes
// use: sorted by name, the first wins.
func confFiles(dir string) ([]string, error) {
	files, err := libcni.ConfFiles(dir, []string{".conf", ".conflist", ".json"})
	if err != nil {
		return nil, fmt.Errorf("read CNI conf dir %s: %w", dir, err)
	}
	sort.Strings(files)
	return files, nil
}

// EnsureDefaultConfig writes the default conflist when the conf dir has no
// network of its own; a conflist Flotilla wrote earlier is rewritten when
// it differs (the pod CIDR changed). It returns the file that will be used
// and whether it wrote it.
func EnsureDefaultConfig(c Config) (path string, written bool, err error) {
	c = c.withDefaults()
	files, err := confFiles(c.ConfDir)
	if err != nil {
		return "", false, err
	}
	ours := filepath.Join(c.ConfDir, DefaultConfFile)
	for _, f := range files {
		if f != ours || !generated(f) {
			return files[0], false, nil
		}
	}
	want, err := DefaultConfList(c)
	if err != nil {
		return "", false, err
	}
	if have, err := os.ReadFile(ours); err == nil && bytes.Equal(have, want) {
		return ours, false, nil
	}
	if err := os.MkdirAll(c.ConfDir, 0o755); err != nil {
		return "", false, fmt.Errorf("create CNI conf dir: %w", err)
	}
	if err := atomicfile.Write(ours, want, 0o644); err != nil {
		return "", false, fmt.Errorf("CNI configuration: %w", err)
	}
	return ours, true, nil
}

func generated(path string) bool {
	c, err := ReadGenerated(path)
	return err == nil && c != nil
}

// loadConfList reads a .conflist, or wraps a single-plugin .conf/.json.
func loadConfList(path string) (*libcni.NetworkConfigList, error) {
	if filepath.Ext(path) == ".conflist" {
		l, err := libcni.ConfListFromFile(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrConfig, path, err)
		}
		return l, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	conf, err := libcni.NetworkPluginConfFromBytes(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrConfig, path, err)
	}
	l, err := libcni.ConfListFromConf(conf)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrConfig, path, err)
	}
	return l, nil
}

// ReadGenerated reads back the conflist at path when DefaultConfList wrote
// it, as the Config it was rendered from (network name, bridge, pod CIDR,
// IPAM dir), so that whoever undoes the network (flotilla-agent cleanup)
// knows it without parsing the file again; nil, nil when there is no such
// file or it is an administrator's.
func ReadGenerated(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the CNI configuration: %w", err)
	}
	var list struct {
		Name      string            `json:"name"`
		Generated bool              `json:"flotilla.dev/generated"`
		Plugins   []json.RawMessage `json:"plugins"`
	}
	if json.Unmarshal(b, &list) != nil || !list.Generated {
		// Not ours (ours is always valid JSON with the mark): leave it.
		return nil, nil
	}
	c := &Config{ConfDir: filepath.Dir(path), NetworkName: list.Name, BridgeName: DefaultBridge, IPAMDataDir: DefaultIPAMDataDir}
	for _, raw := range list.Plugins {
		var p struct {
			Type   string `json:"type"`
			Bridge string `json:"bridge"`
			IPAM   struct {
				Ranges  [][]struct{ Subnet string } `json:"ranges"`
				DataDir string                      `json:"dataDir"`
			} `json:"ipam"`
		}
		if json.Unmarshal(raw, &p) != nil || p.Type != "bridge" {
			continue
		}
		if p.Bridge != "" {
			c.BridgeName = p.Bridge
		}
		if p.IPAM.DataDir != "" {
			c.IPAMDataDir = p.IPAM.DataDir
		}
		if len(p.IPAM.Ranges) > 0 && len(p.IPAM.Ranges[0]) > 0 {
			c.PodCIDR = p.IPAM.Ranges[0][0].Subnet
		}
	}
	return c, nil
}
