// Package hubapi measures the hub's API: create throughput and latency
// with concurrent clients, and watch fan-out to many watchers.
package hubapi
