// Command flotilla-logger is the containerd logging binary Flotilla's agent
// gives each container (see agent/runtime/logdriver). Install it next to
// flotilla-agent.
package main

import (
	"os"

	"flotilla.dev/flotilla/agent/runtime/logdriver"
)

func main() {
	os.Exit(logdriver.Main(os.Args[1:], os.Stderr))
}
