package agentbench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"flotilla.dev/flotilla/bench/iptrules"
	"flotilla.dev/flotilla/internal/mountinfo"
)

// kubeletSysctls are the kernel settings the kubelet sets at start
// (unless protectKernelDefaults, with which it refuses to start where
// they differ): restored after the run.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// kubeletHostDirs are fixed paths the kubelet creates whatever its root
// dir: its device plugin socket's dir and the container log links.
const (
	kubeletDevicePluginRoot = "/var/lib/kubelet"
	kubeletContainerLogs    = "/var/log/containers"
)

// iptablesTables are where the kubelet adds KUBE-* chains (a hint chain
// in mangle, KUBE-FIREWALL in filter, a canary in all three).
var iptablesTables = []string{"filter", "nat", "mangle"}

// hostState is what the kubelet changes outside its own dirs, noted
// before it starts.
type hostState struct {
	sysctls map[string]string
	// chains holds the KUBE-* chains per "binary table".
	chains map[string]map[string]bool
	// tables are the nftables tables ("table ip mangle") iptables-nft
	// had: the kubelet's chains make the ones they need.
	tables  map[string]bool
	existed map[string]bool
}

// criCgroupParent is the cgroup containerd's CRI plugin puts containers
// under when the kubelet gives none (it runs without QoS cgroups here).
const criCgroupParent = "k8s.io"

// cgroupDirs are the CRI plugin's parent cgroup in each hierarchy
// (/sys/fs/cgroup/<controller>/k8s.io on cgroup v1, /sys/fs/cgroup/k8s.io
// on v2).
func cgroupDirs() []string {
	dirs := []string{filepath.Join("/sys/fs/cgroup", criCgroupParent)}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", e.Name(), criCgroupParent))
		}
	}
	return dirs
}

// nftTables lists the nftables tables, nil without nft.
func nftTables() map[string]bool {
	out, err := exec.Command("nft", "list", "tables").Output()
	if err != nil {
		return nil
	}
	tables := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			tables[l] = true
		}
	}
	return tables
}

func readHostState() (*hostState, error) {
	h := &hostState{sysctls: map[string]string{}, chains: map[string]map[string]bool{}, existed: map[string]bool{}, tables: nftTables()}
	for _, k := range kubeletSysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return nil, fmt.Errorf("reading sysctl %s: %w", k, err)
		}
		h.sysctls[k] = strings.TrimSpace(string(b))
	}
	for _, bin := range iptablesBinaries() {
		for _, table := range iptablesTables {
			rules, err := iptablesRules(bin, table)
			if err != nil {
				return nil, err
			}
			h.chains[bin+" "+table] = kubeChains(rules)
		}
	}
	for _, p := range append([]string{kubeletDevicePluginRoot, kubeletContainerLogs}, cgroupDirs()...) {
		_, err := os.Lstat(p)
		h.existed[p] = err == nil
	}
	return h, nil
}

func iptablesBinaries() []string {
	var out []string
	for _, bin := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(bin); err == nil {
			out = append(out, bin)
		}
	}
	return out
}

func iptablesRules(bin, table string) ([]string, error) {
	out, err := exec.Command(bin, "-w", "-t", table, "-S").Output()
	if err != nil {
		return nil, fmt.Errorf("%s -t %s -S: %w", bin, table, err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n"), nil
}

// kubeChains are the KUBE-* chains an `iptables -S` listing creates.
func kubeChains(rules []string) map[string]bool {
	out := map[string]bool{}
	for _, r := range rules {
		f := strings.Fields(r)
		if len(f) == 2 && f[0] == "-N" && strings.HasPrefix(f[1], "KUBE-") {
			out[f[1]] = true
		}
	}
	return out
}

// newChainCleanup is what removes the KUBE-* chains of rules that before
// did not have: the rules of other chains that jump to one (as
// `iptables -D` arguments), then the chains, which are flushed and
// deleted.
func newChainCleanup(before map[string]bool, rules []string) (jumps [][]string, chains []string) {
	added := map[string]bool{}
	for c := range kubeChains(rules) {
		if !before[c] {
			added[c] = true
			chains = append(chains, c)
		}
	}
	sort.Strings(chains)
	for _, r := range rules {
		args := iptrules.Split(r)
		if len(args) < 2 || args[0] != "-A" || added[args[1]] {
			continue
		}
		for i := 2; i+1 < len(args); i++ {
			if (args[i] == "-j" || args[i] == "-g") && added[args[i+1]] {
				jumps = append(jumps, append([]string{"-D"}, args[1:]...))
				break
			}
		}
	}
	return jumps, chains
}

// restore removes the KUBE-* chains the kubelet added (and the rules that
// jump to them), sets the sysctls back and removes the fixed dirs that
// did not exist before. It runs after the kubelet stopped.
func (h *hostState) restore() []error {
	var errs []error
	for _, bin := range iptablesBinaries() {
		for _, table := range iptablesTables {
			before, ok := h.chains[bin+" "+table]
			if !ok {
				continue
			}
			rules, err := iptablesRules(bin, table)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			jumps, chains := newChainCleanup(before, rules)
			run := func(args ...string) {
				args = append([]string{"-w", "-t", table}, args...)
				if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("%s %s: %v: %s", bin, strings.Join(args, " "), err, bytes.TrimSpace(out)))
				}
			}
			for _, j := range jumps {
				run(j...)
			}
			for _, c := range chains {
				run("-F", c)
			}
			for _, c := range chains {
				run("-X", c)
			}
			// A table iptables-nft made for the kubelet's chains goes
			// too once it holds nothing but its built-in chains.
			family := map[string]string{"iptables": "ip", "ip6tables": "ip6"}[bin]
			name := "table " + family + " " + table
			if h.tables == nil || h.tables[name] || !nftTables()[name] {
				continue
			}
			if rules, err := iptablesRules(bin, table); err == nil && onlyPolicies(rules) {
				if out, err := exec.Command("nft", "delete", "table", family, table).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("nft delete %s: %v: %s", name, err, bytes.TrimSpace(out)))
				}
			}
		}
	}
	for k, v := range h.sysctls {
		p := filepath.Join("/proc/sys", k)
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == v {
			continue
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring sysctl %s to %s: %w", k, v, err))
		}
	}
	for p, existed := range h.existed {
		switch {
		case existed:
		case strings.HasPrefix(p, "/sys/fs/cgroup/"):
			errs = append(errs, removeCgroups(p)...)
		default:
			errs = append(errs, unmountUnder(p)...)
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// onlyPolicies says an `iptables -S` listing has nothing but the built-in
// chains' policies.
func onlyPolicies(rules []string) bool {
	for _, r := range rules {
		if r = strings.TrimSpace(r); r != "" && !strings.HasPrefix(r, "-P ") {
			return false
		}
	}
	return true
}

// removeCgroups removes a cgroup and those under it, deepest first; a
// cgroup that still has processes stays, with an error.
func removeCgroups(dir string) []error {
	var dirs []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
		}
	}
	return errs
}

// removeLogLinks removes the links the kubelet made in
// /var/log/containers to its pods' logs under podLogs, when that dir was
// there before (else restore removes it).
func (h *hostState) removeLogLinks(podLogs string) {
	if !h.existed[kubeletContainerLogs] {
		return
	}
	entries, err := os.ReadDir(kubeletContainerLogs)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(kubeletContainerLogs, e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, podLogs+"/") {
			os.Remove(p)
		}
	}
}

// unmountUnder detaches every mount at or under dir, deepest first.
func unmountUnder(dir string) []error {
	mounts, err := mountinfo.Under(dir)
	if err != nil {
		return []error{err}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	var errs []error
	for _, mp := range mounts {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	return errs
}
