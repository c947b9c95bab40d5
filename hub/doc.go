// Package hub assembles the hub process: the store in the data dir, the
// PKI, the API server on HTTPS, and the loops that run against it
// (controllers, scheduler, GitOps sources). Each part is its own package;
// this one only wires them and owns their lifetimes.
package hub
