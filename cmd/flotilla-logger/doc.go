// Command flotilla-logger is the containerd logging binary the agent gives
// each container: it writes the container's stdout and stderr to a
// size-rotated file in the CRI log format (see agent/runtime/logdriver).
// The agent finds it next to its own executable or in PATH, so it is
// installed beside flotilla-agent.
//
// containerd's runc shim starts it with key/value arguments; "version"
// alone prints the version, as every Flotilla binary does.
package main
