package memlimit

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Auto is the value of a --memory-limit flag that derives the limit from
// the cgroup; an empty value means the same.
const Auto = "auto"

// CgroupRatio is the share of the cgroup's memory limit the runtime is
// asked to keep under, as Prometheus' --auto-gomemlimit.ratio.
const CgroupRatio = 0.9

// Min is the smallest limit Parse accepts: below it a daemon would spend
// its time collecting, and a value that small is a slip ("1" for 1 GiB).
const Min = 64 << 20

// EnvVar is the runtime's own setting, which wins over both.
const EnvVar = "GOMEMLIMIT"

// Setting is a parsed --memory-limit.
type Setting struct {
	// Auto derives the limit from the cgroup.
	Auto bool
	// Bytes is the limit given; 0 is none.
	Bytes int64
}

// Parse reads a --memory-limit: a Kubernetes quantity (1Gi, 1536Mi, 2G)
// or a size as GOMEMLIMIT writes it (1GiB, as the agent's flag), 0 or off
// for none, or auto (or empty) to derive it from the cgroup.
func Parse(s string) (Setting, error) {
	switch s {
	case "", Auto:
		return Setting{Auto: true}, nil
	case "off":
		return Setting{}, nil
	}
	n, err := parseSize(s)
	switch {
	case err != nil:
		return Setting{}, err
	case n == 0:
		return Setting{}, nil
	case n < Min:
		return Setting{}, fmt.Errorf("%q is %d bytes, below the %dMi the process needs to do anything but collect garbage: give a size such as 1Gi (the suffix counts), or 0 for none", s, n, Min>>20)
	}
	return Setting{Bytes: n}, nil
}

// runtimeUnits are GOMEMLIMIT's suffixes.
var runtimeUnits = []struct {
	suffix string
	shift  uint
}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}, {"B", 0}}

func parseSize(s string) (int64, error) {
	bad := fmt.Errorf("%q: want a quantity such as 1Gi or 1536Mi (or 1GiB as GOMEMLIMIT writes it), 0 or off for none, or %s (from the cgroup's limit)", s, Auto)
	for _, u := range runtimeUnits {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := strconv.ParseInt(num, 10, 64)
			if err != nil || n < 0 || n > math.MaxInt64>>u.shift {
				return 0, bad
			}
			return n << u.shift, nil
		}
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, bad
	}
	if q.Sign() < 0 {
		return 0, fmt.Errorf("%q is negative: give a size such as 1Gi, or 0 for none", s)
	}
	return q.Value(), nil
}

// Decision is the limit chosen and why.
type Decision struct {
	// Limit in bytes; 0 is none.
	Limit int64
	// Source says where it comes from: "GOMEMLIMIT", "--memory-limit",
	// the cgroup's file, or why there is none.
	Source string
	// FromEnv: the runtime took the limit from GOMEMLIMIT itself, and
	// Apply leaves it.
	FromEnv bool
}

// Env is what Choose looks at besides the setting.
type Env struct {
	// LookupEnv reads the environment (os.LookupEnv).
	LookupEnv func(string) (string, bool)
	// Root is the root the /proc and /sys paths are read under: "/"
	// except in tests.
	Root string
	// Current is the runtime's limit now (debug.SetMemoryLimit(-1)),
	// reported when GOMEMLIMIT set it.
	Current func() int64
}

// System is this process's environment.
func System() Env {
	return Env{LookupEnv: os.LookupEnv, Root: "/", Current: func() int64 { return debug.SetMemoryLimit(-1) }}
}

// Choose decides the limit: GOMEMLIMIT when set, else the setting's bytes,
// else (auto) CgroupRatio of the cgroup's limit when there is one, else
// none.
func Choose(s Setting, env Env) (Decision, error) {
	if v, ok := env.LookupEnv(EnvVar); ok && v != "" {
		cur := env.Current()
		if cur == math.MaxInt64 {
			cur = 0 // GOMEMLIMIT=off
		}
		return Decision{Limit: cur, Source: EnvVar + "=" + v, FromEnv: true}, nil
	}
	if !s.Auto {
		if s.Bytes == 0 {
			return Decision{Source: "--memory-limit 0"}, nil
		}
		return Decision{Limit: s.Bytes, Source: "--memory-limit"}, nil
	}
	cg, err := CgroupLimit(env.Root)
	if err != nil {
		return Decision{}, err
	}
	if cg.Bytes == 0 {
		return Decision{Source: cg.Why}, nil
	}
	return Decision{Limit: int64(float64(cg.Bytes) * CgroupRatio),
		Source: fmt.Sprintf("%g of %s %s (%s)", CgroupRatio, cg.File, Format(cg.Bytes), cg.Why)}, nil
}

// Apply sets the runtime's limit, unless GOMEMLIMIT did already or there
// is none.
func (d Decision) Apply() {
	if d.FromEnv || d.Limit <= 0 {
		return
	}
	debug.SetMemoryLimit(d.Limit)
}

// Format shows a byte count in MiB (GiB from 10 GiB on), as operators
// write limits.
func Format(n int64) string {
	if n >= 10<<30 {
		return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.0fMiB", float64(n)/(1<<20))
}

var errGarbled = errors.New("not a number of bytes nor max")
