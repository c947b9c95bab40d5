package stats

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of /proc/stat's CPU times: 100 on every Linux the
// agent runs on (USER_HZ is fixed by the kernel's ABI, not CONFIG_HZ).
const userHZ = 100

// FilesystemPath is a filesystem to report, named by what it holds.
type FilesystemPath struct{ Name, Path string }

// HostSource reads the device's figures from the machine it runs on.
type HostSource struct {
	// Proc and Cgroup are where procfs and the cgroup v2 hierarchy are
	// mounted: /proc and /sys/fs/cgroup when empty (tests give others).
	Proc, Cgroup string
	// Filesystems are statfs'd; one that cannot be read is left out.
	Filesystems []FilesystemPath
	Now         func() time.Time
	// Statfs is unix.Statfs when nil.
	Statfs func(path string, st *unix.Statfs_t) error
}

var _ NodeSource = (*HostSource)(nil)

// Node implements NodeSource.
func (h *HostSource) Node(_ context.Context) (NodeStats, error) {
	proc, cg := h.Proc, h.Cgroup
	if proc == "" {
		proc = "/proc"
	}
	if cg == "" {
		cg = "/sys/fs/cgroup"
	}
	now := time.Now
	if h.Now != nil {
		now = h.Now
	}
	n := NodeStats{Time: now()}
	var err error
	// The root cgroup's cpu.stat counts every task on cgroup v2; on v1
	// (or a v2 without it) /proc/stat's busy times say the same.
	if n.CPUNanos, err = cgroup2CPU(filepath.Join(cg, "cpu.stat")); err != nil {
		if n.CPUNanos, err = procStatCPU(filepath.Join(proc, "stat")); err != nil {
			return n, err
		}
	}
	f, err := os.Open(filepath.Join(proc, "meminfo"))
	if err != nil {
		return n, fmt.Errorf("reading memory figures: %w", err)
	}
	defer f.Close()
	m, err := parseMeminfo(f)
	if err != nil {
		return n, fmt.Errorf("%s: %w", f.Name(), err)
	}
	n.MemoryTotal, n.MemoryAvailable = m["MemTotal"], m["MemAvailable"]
	n.MemoryUsage = WorkingSet(m["MemTotal"], m["MemFree"]) // total - free, floored
	n.MemoryWorkingSet = WorkingSet(n.MemoryUsage, m["Inactive(file)"])
	statfs := h.Statfs
	if statfs == nil {
		statfs = unix.Statfs
	}
	for _, p := range h.Filesystems {
		var st unix.Statfs_t
		if p.Path == "" || statfs(p.Path, &st) != nil {
			continue
		}
		bs := uint64(st.Bsize)
		fs := Filesystem{Name: p.Name, Path: p.Path, Capacity: st.Blocks * bs, Available: st.Bavail * bs,
			Inodes: st.Files, InodesFree: st.Ffree}
		fs.Used = WorkingSet(fs.Capacity, st.Bfree*bs)
		n.Filesystems = append(n.Filesystems, fs)
	}
	return n, nil
}

// cgroup2CPU reads usage_usec of a cgroup v2 cpu.stat, in nanoseconds.
func cgroup2CPU(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: usage_usec %q: %w", path, v, err)
			}
			return us * 1000, nil
		}
	}
	return 0, fmt.Errorf("%s has no usage_usec", path)
}

// procStatCPU sums the busy times (everything but idle and iowait; guest
// time is already in user) of /proc/stat's cpu line, in nanoseconds.
func procStatCPU(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("reading CPU figures: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || fields[0] != "cpu" {
			continue
		}
		var busy uint64
		// user nice system idle iowait irq softirq steal
		for i, v := range fields[1:9] {
			if i == 3 || i == 4 {
				continue
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: cpu field %d %q: %w", path, i+1, v, err)
			}
			busy += n
		}
		return busy * uint64(time.Second) / userHZ, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return 0, fmt.Errorf("%s has no cpu line", path)
}

// parseMeminfo reads /proc/meminfo's lines into bytes by name.
func parseMeminfo(r io.Reader) (map[string]uint64, error) {
	out := map[string]uint64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			continue
		}
		if len(fields) >= 3 && fields[2] == "kB" {
			v *= 1024
		}
		out[strings.TrimSuffix(fields[0], ":")] = v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, k := range []string{"MemTotal", "MemFree", "MemAvailable"} {
		if _, ok := out[k]; !ok {
			return nil, errors.New("no " + k + " line")
		}
	}
	return out, nil
}
