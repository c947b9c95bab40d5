package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// trustFigures runs registry/trust's benchmarks (a loopback
// docker-registry, the cosign CLI, containerd) and prints each as a
// figure: verification cold (fetch + verify) and warm (cached verdict)
// for both signature layouts, and one image pulled with and without
// verification.
func trustFigures(ctx context.Context) ([]string, error) {
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-run", "^$", "-bench", "^Benchmark(Verify|Pull)$", "-benchtime", "20x", "./registry/trust/")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%v\n%s", err, out)
	}
	names := map[string]string{
		"Verify/sigtag/cold": "image verification, cold (cosign v2 .sig tag)",
		"Verify/sigtag/warm": "image verification, warm (cached verdict)",
		"Verify/bundle/cold": "image verification, cold (sigstore bundle)",
		"Verify/bundle/warm": "image verification, warm (bundle, cached)",
		"Pull/alone":         "image pull + unpack, no verification",
		"Pull/verified":      "image pull + unpack, verified",
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || f[3] != "ns/op" {
			continue
		}
		key := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndex(key, "-"); i > 0 {
			key = key[:i] // the GOMAXPROCS suffix
		}
		name, ok := names[key]
		if !ok {
			continue
		}
		ns, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			continue
		}
		lines = append(lines, fmt.Sprintf("%-44s %v per image", name, roundDuration(time.Duration(ns))))
	}
	if len(lines) != len(names) {
		return lines, fmt.Errorf("%d of %d figures in:\n%s", len(lines), len(names), out)
	}
	return lines, nil
}

// roundDuration keeps three significant digits.
func roundDuration(d time.Duration) time.Duration {
	for r := time.Nanosecond; r < time.Hour; r *= 10 {
		if d < 1000*r {
			return d.Round(r)
		}
	}
	return d.Round(time.Second)
}
