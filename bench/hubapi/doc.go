// Package hubapi measures the hub's API: create throughput and latency
// with concurrent clients, watch fan-out to many watchers, server-side
// apply beside update for the same object, and the round trip of an exec
// through the hub to a device (driven by test/e2e's fleet, which has one).
package hubapi
