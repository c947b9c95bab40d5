// Package hubapi measures the hub's API: create throughput and latency
// with concurrent clients, watch fan-out to many watchers, and server-side
// apply beside update for the same object.
package hubapi
