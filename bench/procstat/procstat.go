package procstat

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Status reads the kB fields of /proc/PID/status (VmRSS, VmHWM, RssAnon,
// …), in bytes.
func Status(pid int) (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 2 && fs[1] == "kB" {
			n, _ := strconv.ParseInt(fs[0], 10, 64)
			out[k] = n << 10
		}
	}
	return out, sc.Err()
}

// RSS is the process's resident memory in bytes, 0 when pid is 0 or the
// process cannot be read (a figure, not a check).
func RSS(pid int) int64 {
	if pid == 0 {
		return 0
	}
	st, err := Status(pid)
	if err != nil {
		return 0
	}
	return st["VmRSS"]
}

// CPUTicks is the process's user and system time from /proc/PID/stat, in
// clock ticks (USER_HZ, 100 a second).
func CPUTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command (field 2) may hold spaces; the fields after it do not.
	rest := string(b)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	fs := strings.Fields(rest)
	// fs[0] is field 3 (state): utime and stime are fields 14 and 15.
	if len(fs) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat has %d fields after the command", pid, len(fs))
	}
	u, err1 := strconv.ParseInt(fs[11], 10, 64)
	st, err2 := strconv.ParseInt(fs[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", pid, fs[11], fs[12])
	}
	return u + st, nil
}

// CPUSeconds is CPUTicks in seconds, 0 when pid is 0 or unreadable.
func CPUSeconds(pid int) float64 {
	if pid == 0 {
		return 0
	}
	t, err := CPUTicks(pid)
	if err != nil {
		return 0
	}
	return float64(t) / 100
}
