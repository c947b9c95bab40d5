package runtime

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// cgroupRoot is where cgroup hierarchies are mounted.
var cgroupRoot = "/sys/fs/cgroup"

// oomKilled reports whether the kernel OOM-killed a process in the
// container's memory cgroup (cgroupfs driver paths): memory.events on a
// unified (v2) host, memory.oom_control on v1 and hybrid hosts.
func oomKilled(cgroupsPath string) bool {
	if cgroupsPath == "" {
		return false
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		return counter(filepath.Join(cgroupRoot, cgroupsPath, "memory.events"), "oom_kill") > 0
	}
	return counter(filepath.Join(cgroupRoot, "memory", cgroupsPath, "memory.oom_control"), "oom_kill") > 0
}

// counter reads "key N" from a cgroup flat-keyed file; 0 when absent.
func counter(file, key string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 2 && string(f[0]) == key {
			n, _ := strconv.ParseInt(string(f[1]), 10, 64)
			return n
		}
	}
	return 0
}
