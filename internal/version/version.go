// Package version holds the build's version, set at link time with
// -ldflags "-X flotilla.dev/flotilla/internal/version.Version=...".
package version

import (
	"fmt"
	"runtime"
)

// Version and Commit are set by the Makefile at build time.
var (
	Version = "v0.0.0-dev"
	Commit  = "unknown"
)

// String is the one-line version every binary prints.
func String(binary string) string {
	return fmt.Sprintf("%s %s (commit %s, %s, %s/%s)", binary, Version, Commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
