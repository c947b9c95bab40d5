// Command flotilla-agent runs Flotilla's device agent: it registers the
// device as a Node of its hub and runs the pods bound to it on containerd.
package main
