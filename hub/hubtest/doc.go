// Package hubtest starts a real hub on loopback for tests: the same store,
// PKI and API server as flotilla-hub, in a temporary data dir.
package hubtest
