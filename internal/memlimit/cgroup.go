package memlimit

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"flotilla.dev/flotilla/internal/mountinfo"
)

// Cgroup is the memory limit of the cgroup a process runs in.
type Cgroup struct {
	// Bytes is the limit; 0 when there is none.
	Bytes int64
	// File is the file the limit was read from.
	File string
	// Why says which cgroup it is, or why there is no limit.
	Why string
}

// v1Unlimited: cgroup v1 shows no limit as the largest page count in
// bytes (9223372036854771712 with 4 KiB pages), not as "max".
const v1Unlimited = 1 << 62

// CgroupLimit reads the memory limit of this process's cgroup under root
// ("/" but in tests): the smallest of the cgroup's own and its ancestors'
// that the process can see, from cgroup v2's memory.max, or from v1's
// memory.limit_in_bytes when the memory controller is on a v1 hierarchy
// (hybrid hosts). No cgroup, no limit or no memory controller is a Cgroup
// without Bytes; a limit file that is not a number is an error.
func CgroupLimit(root string) (Cgroup, error) {
	v2, v1, err := ownCgroups(filepath.Join(root, "proc/self/cgroup"))
	if errors.Is(err, fs.ErrNotExist) {
		return Cgroup{Why: "no cgroup (no /proc/self/cgroup)"}, nil
	}
	if err != nil {
		return Cgroup{}, err
	}
	mounts, err := cgroupMounts(filepath.Join(root, "proc/self/mountinfo"))
	if err != nil {
		return Cgroup{}, err
	}
	why := "no memory controller among the process's cgroups"
	for _, h := range []struct {
		version, cgroup, file string
		v1                    bool
	}{
		{"v2", v2, "memory.max", false},
		{"v1", v1, "memory.limit_in_bytes", true},
	} {
		if h.cgroup == "" {
			continue
		}
		m, ok := mounts[h.version]
		if !ok {
			continue
		}
		dir, ok := m.dirOf(h.cgroup)
		if !ok {
			why = fmt.Sprintf("cgroup %s %s is outside the hierarchy mounted at %s", h.version, h.cgroup, m.point)
			continue
		}
		cg, found, err := smallest(root, dir, m.point, h.file, h.v1)
		if err != nil {
			return Cgroup{}, err
		}
		if !found {
			// A v2 hierarchy without the memory controller: on a
			// hybrid host it is on v1.
			continue
		}
		if cg.Bytes == 0 {
			cg.Why = fmt.Sprintf("cgroup %s %s has no memory limit", h.version, h.cgroup)
		} else {
			cg.Why = fmt.Sprintf("cgroup %s %s", h.version, h.cgroup)
		}
		return cg, nil
	}
	return Cgroup{Why: why}, nil
}

// ownCgroups reads /proc/self/cgroup: the process's v2 cgroup (the "0::"
// line) and the v1 cgroup of the memory controller.
func ownCgroups(file string) (v2, v1 string, err error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", "", err
	}
	for line := range strings.Lines(string(data)) {
		id, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		controllers, p, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		switch {
		case id == "0" && controllers == "":
			v2 = p
		case slices.Contains(strings.Split(controllers, ","), "memory"):
			v1 = p
		}
	}
	return v2, v1, nil
}

// mount is where a cgroup hierarchy is mounted, and which of its cgroups
// is the mount's root (a container may see only its own subtree).
type mount struct{ point, root string }

// dirOf is the directory of cgroup p under the mount.
func (m mount) dirOf(p string) (string, bool) {
	p = path.Clean(p)
	rel, ok := p, true
	if m.root != "/" {
		switch {
		case p == m.root:
			rel = "/"
		case strings.HasPrefix(p, m.root+"/"):
			rel = strings.TrimPrefix(p, m.root)
		default:
			ok = false
		}
	}
	if strings.HasPrefix(rel, "/..") {
		return "", false
	}
	return path.Join(m.point, rel), ok
}

// cgroupMounts finds the cgroup2 mount ("v2") and the v1 mount holding
// the memory controller ("v1") in mountinfo.
func cgroupMounts(file string) (map[string]mount, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]mount{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		left, right, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		lf, rf := strings.Fields(left), strings.Fields(right)
		if len(lf) < 5 || len(rf) < 1 {
			continue
		}
		m := mount{root: mountinfo.Unescape(lf[3]), point: mountinfo.Unescape(lf[4])}
		switch {
		case rf[0] == "cgroup2":
			if _, seen := out["v2"]; !seen {
				out["v2"] = m
			}
		case rf[0] == "cgroup" && len(rf) >= 3 && slices.Contains(strings.Split(rf[2], ","), "memory"):
			if _, seen := out["v1"]; !seen {
				out["v1"] = m
			}
		}
	}
	return out, sc.Err()
}

// smallest reads name in dir and each parent up to top, and returns the
// smallest limit; found is false when no directory has the file (the
// hierarchy has no memory controller).
func smallest(root, dir, top, name string, v1 bool) (cg Cgroup, found bool, err error) {
	for d := dir; ; d = path.Dir(d) {
		file := path.Join(d, name)
		data, err := os.ReadFile(filepath.Join(root, file))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return Cgroup{}, false, err
		default:
			found = true
			n, err := parseLimit(strings.TrimSpace(string(data)), v1)
			if err != nil {
				return Cgroup{}, false, fmt.Errorf("reading the cgroup's memory limit from %s: %q: %w", file, strings.TrimSpace(string(data)), err)
			}
			if n > 0 && (cg.Bytes == 0 || n < cg.Bytes) {
				cg.Bytes, cg.File = n, file
			}
		}
		if d == top || d == "/" || d == "." {
			return cg, found, nil
		}
	}
}

// parseLimit reads a limit file: bytes, or "max" (v2) or a huge number
// (v1) for none (0).
func parseLimit(s string, v1 bool) (int64, error) {
	if s == "max" && !v1 {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, errGarbled
	}
	if v1 && n >= v1Unlimited {
		return 0, nil
	}
	return n, nil
}
