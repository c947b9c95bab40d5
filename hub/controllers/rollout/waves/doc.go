// Package waves holds the decisions of a staged rollout that the rollout
// loop and the DaemonSet loop must make alike: which wave each device is
// in, which devices may run a workload's new version (the Plan), and
// whether a wave met its success criteria. It has no clients and no
// clock of its own, so both loops compute the same answer from the same
// objects, and tests check the rules without a hub.
package waves
