package main

import (
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultMemoryLimit is the agent's default soft memory limit. The agent
// holds about 20 MB of Go memory with 20 pods; past 64 MiB the collector
// works harder rather than let the heap double, since on a small device
// the memory is better left to the pods. It is a soft limit: a live heap
// above it is kept, at up to half a core of collection, never a crash.
const DefaultMemoryLimit = "64MiB"

// parseMemoryLimit reads memory-limit as the GOMEMLIMIT environment
// variable is written (a byte count with an optional B, KiB, MiB, GiB or
// TiB suffix), or "off": the Go runtime's own setting, GOMEMLIMIT's if
// the environment has it, none otherwise (0 is returned).
func parseMemoryLimit(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "off" {
		return 0, nil
	}
	num, unit := s, int64(1)
	for _, u := range []struct {
		suffix string
		scale  int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			num, unit = strings.TrimSuffix(s, u.suffix), u.scale
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/unit {
		return 0, fmt.Errorf("--memory-limit %q: want a size such as 64MiB (B, KiB, MiB, GiB or TiB), or off", s)
	}
	if n*unit < 16<<20 {
		// The agent's runtime alone holds more: the collector would run
		// without pause.
		return 0, fmt.Errorf("--memory-limit %q is below 16MiB, less than the agent holds idle", s)
	}
	return n * unit, nil
}

// applyMemoryLimit sets the Go runtime's soft memory limit from the
// configuration; "off" leaves it as the runtime started.
func applyMemoryLimit(s string) error {
	n, err := parseMemoryLimit(s)
	if err != nil || n == 0 {
		return err
	}
	debug.SetMemoryLimit(n)
	return nil
}
