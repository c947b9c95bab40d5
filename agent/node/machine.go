package node

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Stats are the machine's figures the capacity and the pressure conditions
// come from.
type Stats struct {
	CPUs int
	// Memory in bytes: MemTotal and MemAvailable of /proc/meminfo.
	MemoryTotal, MemoryAvailable uint64
	// Disk in bytes, of the filesystem holding the agent's data dir.
	DiskTotal, DiskAvailable uint64
	// Procs is the number of tasks (threads) on the machine, PIDMax the
	// kernel's limit on their IDs.
	Procs, PIDMax uint64
}

// SystemInfo is what goes into Node.status.nodeInfo besides versions.
type SystemInfo struct {
	KernelVersion   string
	OSImage         string
	Architecture    string
	OperatingSystem string
	MachineID       string
	BootID          string
	Hostname        string
}

// Machine reads the machine's figures. HostMachine is the real one.
type Machine interface {
	Stats(dataDir string) (Stats, error)
	Info() (SystemInfo, error)
}

// HostMachine reads /proc, /sys and statfs of the machine it runs on.
type HostMachine struct{}

var _ Machine = HostMachine{}

// Stats implements Machine.
func (HostMachine) Stats(dataDir string) (Stats, error) {
	s := Stats{CPUs: runtime.NumCPU()}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return s, fmt.Errorf("reading memory figures: %w", err)
	}
	defer f.Close()
	s.MemoryTotal, s.MemoryAvailable, err = parseMeminfo(f)
	if err != nil {
		return s, fmt.Errorf("/proc/meminfo: %w", err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dataDir, &fs); err != nil {
		return s, fmt.Errorf("statfs of the data dir %s: %w", dataDir, err)
	}
	s.DiskTotal = fs.Blocks * uint64(fs.Bsize)
	s.DiskAvailable = fs.Bavail * uint64(fs.Bsize)
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return s, fmt.Errorf("sysinfo: %w", err)
	}
	s.Procs = uint64(si.Procs)
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return s, fmt.Errorf("reading pid_max: %w", err)
	}
	if s.PIDMax, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err != nil {
		return s, fmt.Errorf("/proc/sys/kernel/pid_max: %w", err)
	}
	return s, nil
}

// Info implements Machine.
func (HostMachine) Info() (SystemInfo, error) {
	info := SystemInfo{Architecture: runtime.GOARCH, OperatingSystem: runtime.GOOS}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return info, fmt.Errorf("uname: %w", err)
	}
	info.KernelVersion = unix.ByteSliceToString(u.Release[:])
	info.OSImage = "Linux"
	for _, p := range []string{"/etc/os-release", "/usr/lib/os-release"} {
		if b, err := os.ReadFile(p); err == nil {
			if name := prettyName(b); name != "" {
				info.OSImage = name
			}
			break
		}
	}
	// Both are optional: containers and minimal images may lack them.
	info.MachineID = readTrimmed("/etc/machine-id")
	info.BootID = readTrimmed("/proc/sys/kernel/random/boot_id")
	info.Hostname, _ = os.Hostname()
	return info, nil
}

func readTrimmed(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// parseMeminfo reads MemTotal and MemAvailable (in kB) as bytes.
func parseMeminfo(r io.Reader) (total, avail uint64, err error) {
	var haveTotal, haveAvail bool
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		var dst *uint64
		switch fields[0] {
		case "MemTotal:":
			dst, haveTotal = &total, true
		case "MemAvailable:":
			dst, haveAvail = &avail, true
		default:
			continue
		}
		v, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s %q: %w", fields[0], fields[1], err)
		}
		if len(fields) >= 3 && fields[2] == "kB" {
			v *= 1024
		}
		*dst = v
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if !haveTotal || !haveAvail {
		return 0, 0, errors.New("no MemTotal or MemAvailable line (kernel older than 3.14?)")
	}
	return total, avail, nil
}

// prettyName returns os-release's PRETTY_NAME, unquoted.
func prettyName(b []byte) string {
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		k, v, ok := strings.Cut(strings.TrimSpace(string(line)), "=")
		if !ok || k != "PRETTY_NAME" {
			continue
		}
		if uq, err := strconv.Unquote(v); err == nil {
			return uq
		}
		return strings.Trim(v, `"'`)
	}
	return ""
}

// DefaultRouteIP returns the first IPv4 address of the interface that
// holds the IPv4 default route: the address other machines most likely
// reach this one on.
func DefaultRouteIP() (net.IP, error) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return nil, fmt.Errorf("reading the routing table: %w", err)
	}
	defer f.Close()
	ifname, err := defaultRouteInterface(f)
	if err != nil {
		return nil, err
	}
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("default route interface %s: %w", ifname, err)
	}
	addrs, err := iface.Addrs()
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", ifname, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.To4(), nil
		}
	}
	return nil, fmt.Errorf("the default route interface %s has no IPv4 address; set --node-ip", ifname)
}

// ErrNoDefaultRoute means the machine has no IPv4 default route.
var ErrNoDefaultRoute = errors.New("no IPv4 default route; set --node-ip to the address the hub reaches this device on")

// defaultRouteInterface parses /proc/net/route for the interface of the
// default route with the lowest metric.
func defaultRouteInterface(r io.Reader) (string, error) {
	sc := bufio.NewScanner(r)
	best, bestMetric := "", uint64(0)
	first := true
	for sc.Scan() {
		if first { // header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		dst, err := strconv.ParseUint(f[1], 16, 32)
		if err != nil || dst != 0 {
			continue
		}
		mask, err := strconv.ParseUint(f[7], 16, 32)
		if err != nil || mask != 0 {
			continue
		}
		flags, err := strconv.ParseUint(f[3], 16, 32)
		if err != nil || flags&unix.RTF_UP == 0 {
			continue
		}
		metric, _ := strconv.ParseUint(f[6], 10, 64)
		if best == "" || metric < bestMetric {
			best, bestMetric = f[0], metric
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if best == "" {
		return "", ErrNoDefaultRoute
	}
	return best, nil
}
