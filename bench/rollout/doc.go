// Package rollout drives the benchmark "rolling update of an N-replica
// Deployment with simulated devices: time to complete" against a running
// hub whose controllers and scheduler are on.
package rollout
